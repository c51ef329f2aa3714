#!/usr/bin/env bash
# Call 2: issue 51's final A/B in one run -- A = 399676a's CLI (.carry/cliOld), B = main's
# (.carry/cliNew/fp4gemm); both with FP4GEMM_DIGEST=1 (an FNV-1a digest of every case's outputs).
# Layer suite: B with --decode-tokens 0 (399676a has no decode path). Rounds interleaved A, B.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; R=/tmp/ab; mkdir -p "$OUT" $R
export FP4GEMM_DIGEST=1
A=.carry/cliOld/fp4gemm; Bc=.carry/cliNew/fp4gemm
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$SECONDS; BUDGET=${BUDGET:-520}
run() {  # suite-tag side round args...
  local tag=$1 side=$2 rnd=$3; shift 3
  local bin=$A; [ $side = B ] && bin=$Bc
  local extra=(); [ $side = B ] && [[ $tag == layer* ]] && extra=(--decode-tokens 0)
  timeout 300 $bin bench "$@" "${extra[@]}" --settle-ms 100 --json $R/${tag}_${side}${rnd}.json > $R/${tag}_${side}${rnd}.txt 2>&1
  echo "$tag $side$rnd rc=$? $((SECONDS - t0)) s"
}
for rnd in 1 2; do
  for s in A B; do run seed $s $rnd --suite seed --no-peers; run dense $s $rnd --suite dense --no-peers; run dual $s $rnd --suite dual --no-peers; done
done
for s in A B; do run layer_w4a16 $s 1 --suite layer --act bf16; run layer_w4a4 $s 1 --suite layer --act nvfp4; done
for s in A B; do run moe_w4a4 $s 1 --suite moe --act nvfp4; run moe_w4a16 $s 1 --suite moe --act bf16; done
for s in A B; do [ $((SECONDS - t0)) -lt $BUDGET ] && run layer_w4a16 $s 2 --suite layer --act bf16; done
for s in A B; do [ $((SECONDS - t0)) -lt $BUDGET ] && run layer_w4a4 $s 2 --suite layer --act nvfp4; done
python3 .carry/probe/ab_compare.py $R
tar czf "$OUT/ab.tgz" -C $R .

#!/usr/bin/env bash
# v69 f (one H200, one call): branch exp/pieces-9op's CLI (.carry/v109p): MXFP4 weights in pieces decoded in 9
# operations per word (bits permuted by pack_pieces). NVFP4 pieces are not decoded right on this branch: not run.
#   1. checks: `moe --check` on pieces against the CPU reference (gpumode: bit-identical; full: SPEC 3's bound),
#      W4A16 and W4A4 MXFP4;
#   2. the W4A16 and W4A4 MXFP4 layer suites on pieces (then rows: unchanged code) with digests, 2 rounds: digests
#      must equal v68 d5's; times against d5's and against this call's rows;
#   3. the MoE GEMMs of v69 b / e on pieces and rows.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v109p; mkdir -p $C; xz -dc .carry/v109p/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
for spec in "bf16 gpumode 5760 2880 16 4 32" "bf16 gpumode 2048 768 32 8 64" "bf16 full 2880 2880 64 4 32" "mxfp4 gpumode 1536 2048 32 8 64" "bf16 checkpoint 2880 2880 8 4 32"; do
  read act val n k T tk E <<< "$spec"
  f=$R/check_${act}_${val}_${n}x${k}_T$T.txt
  timeout 40 $C/fp4gemm moe --experts $E --n $n --k $k --tokens $T --topk $tk --act $act --values $val --weight-layout pieces --check --iters 5 > $f 2>&1
  echo "check $act $val ${n}x$k T$T rc $? : $(grep -iE 'check|pass|fail|mismatch' $f | head -2 | tr '\n' ' ')"
done
echo "[checks $((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for act in bf16 mxfp4; do for wl in pieces rows; do
  [ $((SECONDS - t0)) -gt 200 ] && break
  timeout 100 $C/fp4gemm bench --suite layer --act $act --weight-layout $wl --settle-ms 100 --json $R/layer_${act}_${wl}$rnd.json > $R/layer_${act}_${wl}$rnd.txt 2>&1
  echo "layer $act $wl r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
unset FP4GEMM_DIGEST
for job in g1:5760:2880:4 g2:2880:2880:4 q1:1536:2048:8 q2:2048:768:8; do for T in 64 512; do
  IFS=: read nm n k tk <<< "$job"
  for wl in rows pieces; do
    f=$R/moe_${nm}_T${T}_$wl.txt
    timeout 60 $C/fp4gemm moe --experts 128 --n $n --k $k --tokens $T --topk $tk --act bf16 --weight-layout $wl > $f 2>&1
    echo "T$T $nm $wl $(grep -oE 'time: [0-9.]+ us \(median of [0-9]+, min [0-9.]+\)' $f | sed 's/median of [0-9]*, //')"
  done
done; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

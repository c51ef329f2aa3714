#!/usr/bin/env bash
# v115 call C (an H200: issue 51's measurement): v50's redesign A/B again, A = 399676a's CLI (the redesign's start,
# tools patched with v50's old_cli_digest.patch; .carry/a_cli.tar.xz, built in /work/ba), B = main's CLI (/tmp/b
# if the machine is warm from call A or B, else .carry/nw_cli.tar.xz); FP4GEMM_DIGEST=1 (an FNV-1a digest of every
# case's outputs). Layer suites: B with --decode-tokens 0 (399676a has no decode path). Rounds interleaved A, B.
# PART=1: seed / dense / dual rounds 1-2 and the MoE suites (W4A4 NVFP4, W4A16) round 1, then issue 51's cell
# (mixtral down, E 8, N 4096, K 14336, top-2, uniform T 1024 and balanced R 272, rows, W4A16 / W4A4, 3 rounds).
# PART=2: layer suites (W4A16, W4A4) rounds 1-2 and the MoE suites round 2. Results accumulate in /tmp/ab51 and
# come back as c51_part$PART.tgz. Compare: bench/results/v50/probe/ab_compare.py (trim.sh out with v50 kept).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=/tmp/ab51; mkdir -p $R /tmp/xa; export FP4GEMM_DIGEST=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
t0=$SECONDS
[ -x /tmp/xa/tools/fp4gemm ] || xz -dc .carry/a_cli.tar.xz | tar xf - -C /tmp/xa || { echo "no 399676a CLI"; exit 3; }
[ -x /tmp/b/tools/fp4gemm ] || { mkdir -p /tmp/b && xz -dc .carry/nw_cli.tar.xz | tar xf - -C /tmp/b; } || { echo "no main CLI"; exit 3; }
A=/tmp/xa/tools/fp4gemm Bc=/tmp/b/tools/fp4gemm
run() {  # tag side round args...
  local tag=$1 side=$2 rnd=$3; shift 3
  local bin=$A extra=(); [ $side = B ] && bin=$Bc
  [ $side = B ] && [[ $tag == layer* ]] && extra=(--decode-tokens 0)
  timeout 200 $bin bench "$@" "${extra[@]}" --settle-ms 100 --json $R/${tag}_${side}${rnd}.json > $R/${tag}_${side}${rnd}.txt 2>&1
  echo "$tag $side$rnd rc=$? [$((SECONDS - t0)) s]"
}
if [ "${PART:-1}" = 1 ]; then
  for rnd in 1 2; do for s in A B; do
    run seed $s $rnd --suite seed --no-peers; run dense $s $rnd --suite dense --no-peers; run dual $s $rnd --suite dual --no-peers
  done; done
  for s in A B; do run moe_w4a4 $s 1 --suite moe --act nvfp4 --no-peers; run moe_w4a16 $s 1 --suite moe --act bf16 --no-peers; done
  for rnd in 1 2 3; do for cell in U 272; do for act in bf16 nvfp4; do for s in A B; do
    if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens 1088 --routing balanced"; fi
    b=$A; [ $s = B ] && b=$Bc
    echo "$rnd $cell $act $s $(timeout 60 $b moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
  done; done; done; done > $R/cell51.txt
  echo "cells [$((SECONDS - t0)) s]"
  python3 - $R/cell51.txt <<'PY'
import sys, collections, statistics
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for c in ["U", "272"]:
    for a in ["bf16", "nvfp4"]:
        o, m = (statistics.median(t[(c, a, s)]) for s in "AB")
        print(f"{c:>4} {a:5} 399676a {o:.2f} {t[(c, a, 'A')]}  main {m:.2f} {t[(c, a, 'B')]} ({m / o - 1:+.2%})")
PY
else
  for rnd in 1 2; do for s in A B; do
    run layer_w4a16 $s $rnd --suite layer --act bf16 --no-peers; run layer_w4a4 $s $rnd --suite layer --act nvfp4 --no-peers
  done; done
  for s in A B; do run moe_w4a4 $s 2 --suite moe --act nvfp4 --no-peers; run moe_w4a16 $s 2 --suite moe --act bf16 --no-peers; done
fi
python3 bench/results/v50/probe/ab_compare.py $R | tee $R/compare_part${PART:-1}.txt
tar czf $OUT/c51_part${PART:-1}.tgz -C $R .
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v66 c8 (one H200): exp/fused-pieces -- the non-GLU MoE kernels (the layer's GEMM2, the MoE suite's plain GEMMs)
# reading the weights in k-block pieces (a plan-time copy, FP4GEMM_EXP_PIECES=1: per 16 rows and 64-wide k-block
# 512 B; a 3-D TMA map, one LDS.128 per thread per half and k-block instead of two LDS.64). A = main's CLI, B = the
# branch with the variable.
#   (1) the branch's MoE and layer gtests with the variable (MoeGemm*:MoeLayer*: MXFP4 W4A4 decode is off on the
#       branch, so MoeLayerDecode / the decode graph test fail their "decode path" checks by design);
#   (2) the MoE suites (W4A4 NVFP4, W4A16) and the layer suite's general path, 1 round per side, digests;
#   (3) issue 51's cell and class 9 (mixtral down, uniform T 1024 / R 272), W4A16 / W4A4, 3 rounds.
# Carry .carry/v95 (cli_main) and .carry/v97 (cli_pieces, gpu_tests_pieces).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v97; mkdir -p $V; for d in v95 v97; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done; t0=$SECONDS
R=$OUT/r; mkdir -p $R/ab
(FP4GEMM_EXP_PIECES=1 FP4GEMM_EXP_DECODE_FRAG=1 timeout 240 $V/gpu_tests_pieces --gtest_filter='MoeGemm*:MoeLayer*' > $R/tests.txt 2>&1; echo "rc $?" >> $R/tests.txt)
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^rc" $R/tests.txt | head -20
echo "tests [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for rnd in 1; do for side in A B; do
  b=$V/cli_main; env="X=1"; [ $side = B ] && b=$V/cli_pieces env="FP4GEMM_EXP_PIECES=1 FP4GEMM_EXP_DECODE_FRAG=1"
  for act in nvfp4 bf16; do env $env timeout 150 $b bench --suite moe --act $act --settle-ms 100 --json $R/ab/moe_${act}_${side}$rnd.json > $R/ab/moe_${act}_${side}$rnd.txt 2>&1; done
  env $env timeout 150 $b bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $R/ab/layer_${side}$rnd.json > $R/ab/layer_${side}$rnd.txt 2>&1
done; echo "round $rnd [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $R/ab > $R/ab/compare.txt 2>&1; cat $R/ab/compare.txt
unset FP4GEMM_DIGEST
for rnd in 1 2 3; do for cell in 272 U; do for act in bf16 nvfp4; do for side in A B; do
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens 1088 --routing balanced"; fi
  b=$V/cli_main; env="X=1"; [ $side = B ] && b=$V/cli_pieces env="FP4GEMM_EXP_PIECES=1"
  echo "$rnd $cell $act $side $(env $env timeout 60 $b moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
done; done; done; done > $R/cells.txt
python3 - $R/cells.txt <<'PY'
import sys, collections, statistics
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for c in ["272", "U"]:
    for a in ["bf16", "nvfp4"]:
        x, y = statistics.median(t[(c, a, "A")]), statistics.median(t[(c, a, "B")])
        print(f"{c:>4} {a:5} main {x:.2f} pieces {y:.2f} ({y / x - 1:+.2%})")
PY
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

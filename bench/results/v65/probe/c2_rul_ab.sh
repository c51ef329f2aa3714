#!/usr/bin/env bash
# v65 c2 (one H200): the fused kernels' units compiled with ptxas --register-usage-level=10 (N) against main's
# kernels (M = b848b3a's CLI) and 399676a (A, + the digest patch): issue 51's last cell and its width classes, then the
# suites with digests. Carried in two calls back to back (the 64 MiB limit): .carry/v89a (cli_old) only unpacks to
# /tmp/v89; .carry/v89b (cli_main, cli_new) runs:
#   (1) mixtral down (E 8, N 4096, K 14336, top-2) with balanced routing, R rows per expert, and the uniform T 1024
#       cell (seed 1111), W4A16 and W4A4 NVFP4, sides A / M / N interleaved, 2 rounds, 100 iterations each;
#   (2) suites M against N (moe W4A4 / W4A16, seed, dense, dual, layer W4A16 general path) and A against N (moe W4A4 /
#       W4A16, seed, dense), one round per side, FP4GEMM_DIGEST=1; ../../v50/probe/ab_compare.py per pair.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v89; mkdir -p $V; t0=$SECONDS
for d in .carry/v89a .carry/v89b; do [ -f $d/bins.tar.xz ] && xz -dc $d/bins.tar.xz | tar xf - -C $V; done
ls $V; [ -x $V/cli_old ] && [ -x $V/cli_new ] && [ -x $V/cli_main ] || { echo "unpacked only"; exit 0; }
R=$OUT/r; mkdir -p $R/sweep $R/mn $R/an
bin() { case $1 in A) echo $V/cli_old;; M) echo $V/cli_main;; N) echo $V/cli_new;; esac; }
for rnd in 1 2; do for R_ in 128 144 160 192 256 272 296 U; do for act in bf16 nvfp4; do for side in A M N; do
  if [ $R_ = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * R_)) --routing balanced"; fi
  t=$(timeout 60 $(bin $side) moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 \
      --values full --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
  echo "$rnd $R_ $act $side $t"
done; done; done; done > $R/sweep/sweep.txt
echo "sweep [$((SECONDS - t0)) s]"
python3 - $R/sweep/sweep.txt <<'PY'
import sys, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for R_ in ["128", "144", "160", "192", "256", "272", "296", "U"]:
    for act in ["bf16", "nvfp4"]:
        a, m, n = (min(t.get((R_, act, s), [float("nan")])) for s in "AMN")
        print(f"R {R_:>4} {act:5}  A {a:8.2f}  M {m:8.2f}  N {n:8.2f}   M/A {m/a:.3f}  N/A {n/a:.3f}  N/M {n/m:.3f}")
PY
export FP4GEMM_DIGEST=1
suites() {  # $1 = side, $2 = folder, $3 = letter in the file names, $4 = all or plain
  local b=$(bin $1)
  for act in nvfp4 bf16; do timeout 150 $b bench --suite moe --act $act --settle-ms 100 --json $2/moe_${act}_${3}1.json > $2/moe_${act}_${3}1.txt 2>&1; done
  for s in seed dense; do timeout 100 $b bench --suite $s --settle-ms 100 --json $2/${s}_${3}1.json > $2/${s}_${3}1.txt 2>&1; done
  if [ $4 = all ]; then
    timeout 100 $b bench --suite dual --settle-ms 100 --json $2/dual_${3}1.json > $2/dual_${3}1.txt 2>&1
    timeout 150 $b bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $2/layer_${3}1.json > $2/layer_${3}1.txt 2>&1
  fi
  echo "suites $1 -> $2 [$((SECONDS - t0)) s]"
}
suites M $R/mn A all; suites N $R/mn B all
python3 bench/results/v50/probe/ab_compare.py $R/mn > $R/mn/compare.txt 2>&1; cat $R/mn/compare.txt | head -30
suites A $R/an A plain; cp $R/mn/{moe_nvfp4,moe_bf16,seed,dense}_B1.* $R/an/
python3 bench/results/v50/probe/ab_compare.py $R/an > $R/an/compare.txt 2>&1; cat $R/an/compare.txt | head -30
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

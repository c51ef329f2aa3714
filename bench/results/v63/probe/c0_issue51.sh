#!/usr/bin/env bash
# v63 c0 (one H200, ~8 min), from v62's next_session_51.sh: issue 51's timing criterion on today's main, and the candidate fix of its
# five cells (branch exp/desc-redux: the wgmma activation descriptor's stage address through __reduce_max_sync, so
# ptxas keeps the descriptors in uniform registers -- the plain MXFP4 MoE kernel's classes lose their 6 R2UR per 4
# HGMMAs and 20-34 instructions per 2 k-blocks; SASS only, never run). Carry .carry/v81 (one solid xz: cli_old = 399676a
# + bench/results/v50/probe/old_cli_digest.patch, the redesign's start; cli_new = main 3715eae's CLI; cli_rdx =
# exp/desc-redux's CLI where it was built in time; all built on the CPU machine, sm_90a, Release). Without cli_rdx the
# script builds it here from the branch's mainloop.cuh (bench/results/v62/probe/desc_redux.patch; 16 cores, ~3 min).
#   1. v52's ten cells (5 slower in every round then, +1.9..+4.6 %): 3 interleaved rounds of A = old, B = main,
#      C = redux, --settle-ms 300, digests on
#   2. every suite once per side (MoE W4A4 / W4A16, seed, dense, dual, layer on the general path); ab_compare.py per
#      pair (B vs A: the criterion today; C vs A and C vs B: the fix)
# If C is within +-1 % of A on the cells and no suite is slower than B: take the branch (its GPU tier and sanitizers).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R/cells $R/suites; V=/tmp/v81; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v81/bins.tar.xz | tar xf - -C $V
if [ ! -x $V/cli_rdx ]; then
  rm -rf /tmp/b && mkdir -p /tmp/b && cp -r CMakeLists.txt cmake include src tools tests python scripts pyproject.toml /tmp/b/ 2>/dev/null
  (cd /tmp/b && patch -p1 < "$OLDPWD/bench/results/v62/probe/desc_redux.patch") > $R/patch.log 2>&1 || { echo "patch failed"; cat $R/patch.log; }
  cmake -S /tmp/b -B /tmp/b/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TOOLS=ON -DFP4GEMM_BUILD_TESTS=OFF \
    -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.log 2>&1 && ninja -C /tmp/b/build fp4gemm_cli > $R/build.log 2>&1
  echo "build rc=$? [$((SECONDS - t0)) s]"; cp "$(find /tmp/b/build -name fp4gemm -type f -perm -u+x | head -1)" $V/cli_rdx
fi
export FP4GEMM_DIGEST=1
side_bin() { case $1 in A) echo $V/cli_old;; B) echo $V/cli_new;; C) echo $V/cli_rdx;; esac; }
for rnd in 1 2 3; do for side in A B C; do bin=$(side_bin $side)
  timeout 120 $bin bench --suite moe --act nvfp4 --cases 3,5,12,45,54 --settle-ms 300 --json $R/cells/moe_w4a4_$side$rnd.json > $R/cells/moe_w4a4_$side$rnd.txt 2>&1
  timeout 120 $bin bench --suite moe --act bf16 --cases 7,22,47,54,55 --settle-ms 300 --json $R/cells/moe_w4a16_$side$rnd.json > $R/cells/moe_w4a16_$side$rnd.txt 2>&1
done; echo "cells round $rnd [$((SECONDS - t0)) s]"; done
pairs() {  # ab_compare.py reads sides A and B: copy each pair into its own folder
  local d=$1
  for p in BA CA CB; do mkdir -p $d/$p; rm -f $d/$p/*
    for f in $d/*_${p:1:1}[0-9].*; do [ -e "$f" ] && cp "$f" "$d/$p/$(basename "$f" | sed "s/_${p:1:1}\([0-9]\)\./_A\1./")"; done
    for f in $d/*_${p:0:1}[0-9].*; do [ -e "$f" ] && cp "$f" "$d/$p/$(basename "$f" | sed "s/_${p:0:1}\([0-9]\)\./_B\1./")"; done
    echo "== $p (B = ${p:0:1}, A = ${p:1:1})"; python3 bench/results/v50/probe/ab_compare.py $d/$p; done
}
pairs $R/cells | tee $R/cells/compare.txt; tar czf $OUT/r.tgz -C $OUT r
for side in A B C; do bin=$(side_bin $side)
  for act in nvfp4 bf16; do
    timeout 150 $bin bench --suite moe --act $act --settle-ms 100 --json $R/suites/moe_${act}_${side}1.json > $R/suites/moe_${act}_${side}1.txt 2>&1; done
  for s in seed dense dual; do
    timeout 100 $bin bench --suite $s --settle-ms 100 --json $R/suites/${s}_${side}1.json > $R/suites/${s}_${side}1.txt 2>&1; done
  dt=""; [ $side != A ] && dt="--decode-tokens 0"  # (399676a has no decode path, nor the option)
  timeout 150 $bin bench --suite layer --act bf16 $dt --settle-ms 100 --json $R/suites/layer_bf16_${side}1.json > $R/suites/layer_bf16_${side}1.txt 2>&1
  echo "suites $side [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
done
pairs $R/suites | tee $R/suites/compare.txt
tar czf $OUT/r.tgz -C $OUT r

#!/usr/bin/env bash
# v100 (session 113; prepared, not run): the lag <= 3 form of exp/producer-gather2 (`../producer_gather2.patch`,
# on main) built on the machine, then timed by `call_bin.sh` from the same /tmp/pg. One build serves two arms:
# FP4GEMM_EXP_PREPASS_GATHER=1 (branch only) turns the gather back to the pre-pass (arm e), unset it gathers in the
# GEMM (arm d). Main's CLI (arm m) is built too when MAIN=1 (a second ~4 minutes on 16 cores).
#   bash bench/results/v100/probe/call_build.sh && ROUND=1 bash bench/results/v100/probe/call_bin.sh
# Logs under /tmp/pb (tarred into $OUT/pbuild.tgz).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=/tmp/pb; mkdir -p $A /tmp/pg/d /tmp/pg/m
build() {  # $1: source tree, $2: build dir, $3: where the CLI goes
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
    > $A/cmake_$(basename $2).txt 2>&1
  local s=$SECONDS; ninja -C $2 fp4gemm_cli > $A/build_$(basename $2).txt 2>&1; local rc=$?
  echo "build $(basename $2) rc $rc in $((SECONDS - s)) s [$((SECONDS - t0)) s]"
  [ $rc = 0 ] && cp $2/tools/fp4gemm $3/ || tail -20 $A/build_$(basename $2).txt
}
if [ ! -x /tmp/pg/d/fp4gemm ]; then
  rm -rf /tmp/dsrc && mkdir -p /tmp/dsrc
  tar cf - --exclude=./bench/results --exclude=./.carry --exclude=./build . | tar xf - -C /tmp/dsrc
  (cd /tmp/dsrc && patch -p1 < $OLDPWD/bench/results/v100/producer_gather2.patch) > $A/patch.txt 2>&1 || { cat $A/patch.txt; exit 3; }
  build /tmp/dsrc /tmp/bd /tmp/pg/d
fi
[ "${MAIN:-0}" = 1 ] && [ ! -x /tmp/pg/m/fp4gemm ] && build . /tmp/bm /tmp/pg/m
tar czf $OUT/pbuild.tgz -C /tmp pb; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v95 call 3 (one GPU, fresh): main's build (table.sh PHASE=build), MoeLayer.describe()'s segfault reproduced in small
# processes (gdb backtrace of the first that crashes), then issue 52's table with TKL_DESCRIBE=0 (one round).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; P=bench/results/v95/probe; mkdir -p $OUT/c3
TESTS=OFF PHASE=build NAME=c3_build bash $P/table.sh
cp /tmp/b/python/_fp4gemm*.so python/fp4gemm/
export PYTHONPATH=$PWD/python
done_gdb=0
for c in "rows 8 2880 2880 4 4096" "pieces 8 2880 2880 4 4096" "pieces 128 2880 2880 4 4096" "pieces 128 2880 2880 4 64" "rows 128 2880 2880 4 4096"; do
  timeout 60 python3 -X faulthandler $P/describe_repro.py $c > $OUT/c3/rep.txt 2>&1; rc=$?
  echo "describe [$c] rc $rc: $(grep -E 'describe ok|Segmentation|Error' $OUT/c3/rep.txt | head -1 | cut -c1-150) [$((SECONDS - t0)) s]"
  if [ $rc != 0 ] && [ $done_gdb = 0 ]; then done_gdb=1
    timeout 90 gdb -batch -ex run -ex bt -ex "info registers rip" --args python3 $P/describe_repro.py $c > $OUT/c3/gdb.txt 2>&1
    grep -E "^#[0-9]+ " $OUT/c3/gdb.txt | head -14 | cut -c1-220
  fi
done
[ $((SECONDS - t0)) -lt ${TLATE:-380} ] && TKL_DESCRIBE=0 ROUND_REPS="${ROUND_REPS:-100}" HM=0 MAXB=9999 SMOKE=0 NAME=c3_table bash $P/table.sh
tar czf $OUT/c3.tgz -C $OUT c3; echo "call3 done [$((SECONDS - t0)) s]"

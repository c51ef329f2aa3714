#!/usr/bin/env bash
# racecheck of the decode kernels on small layers through the CLI (the gtest case list is too long under racecheck).
set -uo pipefail
R=$OUT/r; mkdir -p $R; B=.carry/build/tools/fp4gemm
i=0
for a in "--experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --act bf16" \
         "--experts 16 --hidden 352 --inter 96 --topk 4 --tokens 3 --act nvfp4 --activation swigluoai" \
         "--experts 12 --hidden 256 --inter 128 --topk 8 --tokens 5 --act mxfp4"; do
  i=$((i+1))
  timeout 150 compute-sanitizer --tool racecheck $B layer $a --iters 1 --warmup 1 > $R/race_$i.log 2>&1; echo "race $i rc=$?"
  grep -E "decode path|ERROR SUMMARY|^time" $R/race_$i.log | cut -c1-160
done
tar czf $OUT/r.tgz -C $OUT r

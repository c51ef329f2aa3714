#!/usr/bin/env bash
# v54 call 2 (one H200): (1) branch f16-nv (main + the f16 NVFP4 decode): every MoeLayer* GPU test and memcheck of
# the decode tests; (2) ncu source-level stall attribution (SASS) of both decode kernels, gpt-oss W4A16 T 1 (case 15)
# and Qwen3 T 1 (case 8), main's CLI (bf16 cells are main's code on the branch too).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v54/gpu_tests_B; B=.carry/v54/fp4gemm_B
timeout 200 $T --gtest_filter='MoeLayer*' > $R/gtest_layer.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt
tail -3 $R/gtest_layer.log
timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt
tail -2 $R/memcheck.log; snap tests
for c in 15 8; do
  timeout 150 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 4 --launch-count 2 \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section SpeedOfLight -f -o /tmp/p$c \
    $B bench --suite layer --act bf16 --cases $c --iters 3 --warmup 1 --settle-ms 0 > $R/ncu_run$c.txt 2>&1
  echo "ncu $c rc=$?" | tee -a $R/rc.txt
  ncu -i /tmp/p$c.ncu-rep --page source --csv --print-source sass > $R/src$c.csv 2> $R/src$c.err
  ncu -i /tmp/p$c.ncu-rep --page details > $R/details$c.txt 2>&1
  snap "ncu $c"
done
ls -la $R

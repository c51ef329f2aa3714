#!/usr/bin/env bash
# v74 b2 (one H200): branch build y (x + the next unit's multiply-side position found once, reused) against main n (.carry/y)
# (kernel 2 of the decode path loading its activations a chunk ahead into registers). Modes as b.sh, on y; plus
#   bash b2.sh tests   decode / pieces gtests and memcheck of the decode tests, on y
#   bash b2.sh ab      decode cells y against n (as b.sh)
#   bash b2.sh ncu     ncu of both decode kernels, y and n, gpt-oss W4A16 pieces T 8 and 1
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/y/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/y/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
for mode in "$@"; do
if [ "$mode" = tests ]; then
  export FP4GEMM_CLI=/tmp/y/cli
  timeout 200 /tmp/y/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:MoeLayerCases.*' > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/y/gt \
    --gtest_filter='MoeLayerDecode.LongShares*:MoeLayerDecode.Every*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
if [ "$mode" = ab ]; then
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in bf16 nvfp4; do for v in y n; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
    echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
  done; done; done
  for act in bf16 nvfp4; do for v in y n; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout rows --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/rows_${act}_${v}_r1.json > $R/rows_${act}_${v}_r1.txt 2>&1
    echo "rows $act $v rc $? [$((SECONDS - t0)) s]"
  done; done
  python3 bench/results/v73/probe/ratios.py $R y n
  mkdir -p $R/rows && cp $R/rows_*.json $R/rows/ && (cd $R/rows && for f in rows_*; do mv $f layer_${f#rows_}; done) && python3 bench/results/v73/probe/ratios.py $R/rows y n
  for p in layer rows; do for act in bf16 nvfp4; do for v in y n; do grep '^digest' $R/${p}_${act}_${v}_r1.txt > $R/dig_${p}_${act}_$v.txt; done
    cmp -s $R/dig_${p}_${act}_y.txt $R/dig_${p}_${act}_n.txt && echo "$p $act digests equal ($(wc -l < $R/dig_${p}_${act}_y.txt))" || echo "$p $act digests DIFFER"; done; done
fi
if [ "$mode" = ncu ]; then  # kernel 2's metrics on y and n, gpt-oss W4A16 pieces T 8 and T 1
  M='gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  for T in 8 1; do for v in y n; do
    timeout 120 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 --metrics "$M" \
      /tmp/$v/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
      --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_gptoss_T${T}_$v.txt 2>&1
    echo "ncu T $T $v rc $? [$((SECONDS - t0)) s]"
  done; done
  python3 bench/results/v73/probe/ncusum.py $R
fi
done
gzip -f $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

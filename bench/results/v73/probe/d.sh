#!/usr/bin/env bash
# v73 d (one H200): bundle .carry/$BUNDLE (default c) holding NEW (gt, cli) and OLD (cli), unpacked into /tmp/$BUNDLE.
#   bash d.sh NEW OLD [tests] [full] [ncu]
# tests: NEW's decode / pieces / layer-case gtests and memcheck of MoeLayerPieces and MoeLayerDecode.Every*; then the
# layer suites on pieces (W4A16, NVFP4 W4A4): decode cells only (cases 1,2,8,9,15,16,22,23), or all 28 with `full`,
# NEW against OLD alternating, 2 rounds, digests; ncu: NEW's decode kernels' metrics (c.sh's) at gpt-oss T 1, 8.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
NEW=$1; OLD=$2; shift 2; ARGS=" $* "
t0=$SECONDS; R=$OUT/r; mkdir -p $R
BN=${BUNDLE:-c}; B=/tmp/$BN; mkdir -p $B; H=$(md5sum < .carry/$BN/b.tar.xz | cut -c1-8)
[ -f $B/done.$H ] || { xz -dc .carry/$BN/b.tar.xz | tar xf - -C $B; touch $B/done.$H; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -12; }
if [[ $ARGS == *" tests "* ]]; then
  export FP4GEMM_CLI=$B/$NEW/cli
  timeout 240 $B/$NEW/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:*MoeLayerCases*:MoeLayerGraph*' > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/$NEW/gt \
    --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.Every*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
export FP4GEMM_DIGEST=1
CASES="--cases 1,2,8,9,15,16,22,23"; [[ $ARGS == *" full "* ]] && CASES=""
for rnd in 1 2; do for act in bf16 nvfp4; do for v in $NEW $OLD; do
  timeout 100 $B/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 $CASES --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
  echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
python3 bench/results/v73/probe/ratios.py $R $NEW $OLD
for act in bf16 nvfp4; do for v in $NEW $OLD; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  cmp -s $R/dig_${act}_$NEW.txt $R/dig_${act}_$OLD.txt && echo "$act digests equal ($(wc -l < $R/dig_${act}_$NEW.txt))" || echo "$act digests DIFFER"; done
if [[ $ARGS == *" ncu "* ]]; then
  M='gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  for T in 1 8; do for v in $NEW $OLD; do
    timeout 120 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 --metrics "$M" \
      $B/$v/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
      --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_gptoss_T${T}_$v.txt 2>&1
    echo "ncu T $T $v rc $? [$((SECONDS - t0)) s]"
  done; done
  python3 bench/results/v73/probe/ncusum.py $R
fi
gzip -f $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

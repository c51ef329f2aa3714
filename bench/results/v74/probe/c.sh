#!/usr/bin/env bash
# v74 c (one H200): decode-path builds side by side. BUNDLE=<tag> (.carry/<tag>/b.tar.xz holding /tmp/<v> for each v in
# VS); the first of VS is the candidate, the last the baseline (main n).
#   bash c.sh tests   decode / pieces gtests and memcheck of the decode tests, on the candidate
#   bash c.sh ab      the layer suite's decode cells (T 1, 8 of Qwen3, Mixtral, gpt-oss), W4A16 and NVFP4 on pieces, each
#                     build in turn, ROUNDS rounds (2); rows one round; ratios of each build to the baseline; digests
#   bash c.sh ncu     ncu of both decode kernels on every build, gpt-oss W4A16 pieces T 8 and 1
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; VS=(${VS:-z n}); C=${VS[0]}; BASE=${VS[-1]}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
for mode in "$@"; do
if [ "$mode" = tests ]; then
  export FP4GEMM_CLI=/tmp/$C/cli
  timeout 200 /tmp/$C/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:MoeLayerCases.*' > $R/gt.txt 2>&1
  echo "gt $C rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/$C/gt \
    --gtest_filter='MoeLayerDecode.LongShares*:MoeLayerDecode.Every*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
if [ "$mode" = ab ]; then
  export FP4GEMM_DIGEST=1
  for rnd in $(seq ${ROUNDS:-2}); do for act in bf16 nvfp4; do for v in "${VS[@]}"; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1 || echo "layer $act $v r$rnd FAILED"
  done; done; echo "pieces round $rnd [$((SECONDS - t0)) s]"; done
  mkdir -p $R/rows
  for act in bf16 nvfp4; do for v in "${VS[@]}"; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout rows --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/rows/layer_${act}_${v}_r1.json > $R/rows/layer_${act}_${v}_r1.txt 2>&1 || echo "rows $act $v FAILED"
  done; done; echo "rows [$((SECONDS - t0)) s]"
  for v in "${VS[@]}"; do [ $v = $BASE ] && continue
    echo "== pieces $v / $BASE"; python3 bench/results/v73/probe/ratios.py $R $v $BASE
    echo "== rows $v / $BASE"; python3 bench/results/v73/probe/ratios.py $R/rows $v $BASE
    for d in $R $R/rows; do for act in bf16 nvfp4; do
      cmp -s <(grep '^digest' $d/layer_${act}_${v}_r1.txt) <(grep '^digest' $d/layer_${act}_${BASE}_r1.txt) \
        && echo "$(basename $d) $act digests equal ($(grep -c '^digest' $d/layer_${act}_${v}_r1.txt))" || echo "$(basename $d) $act digests DIFFER"
    done; done
  done
fi
if [ "$mode" = ncu ]; then
  M='gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
  for T in 8 1; do for v in "${VS[@]}"; do
    timeout 120 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 --metrics "$M" \
      /tmp/$v/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
      --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_gptoss_T${T}_$v.txt 2>&1 || echo "ncu T $T $v FAILED"
  done; done
  python3 bench/results/v73/probe/ncusum.py $R
fi
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

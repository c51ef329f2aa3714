#!/usr/bin/env bash
# v74 b (one H200): branch build x against main n (both in .carry/x): kernel 2 of the decode path loading its
# activations a chunk ahead into registers.
#   bash b.sh tests   decode / pieces gtests (LongShares included) and memcheck of the decode tests, on x
#   bash b.sh ab      the layer suite's decode cells (T 1, 8 of Qwen3, Mixtral, gpt-oss), W4A16 and NVFP4, pieces (2 rounds) and rows
#                     (1 round), x against n alternating; digests compared; ratios
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/x/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/x/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
for mode in "$@"; do
if [ "$mode" = tests ]; then
  export FP4GEMM_CLI=/tmp/x/cli
  timeout 200 /tmp/x/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:MoeLayerCases.*' > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/x/gt \
    --gtest_filter='MoeLayerDecode.LongShares*:MoeLayerDecode.Every*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
if [ "$mode" = ab ]; then
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in bf16 nvfp4; do for v in x n; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
    echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
  done; done; done
  for act in bf16 nvfp4; do for v in x n; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout rows --cases 8,9,15,16,22,23 --no-peers \
      --settle-ms 100 --json $R/rows_${act}_${v}_r1.json > $R/rows_${act}_${v}_r1.txt 2>&1
    echo "rows $act $v rc $? [$((SECONDS - t0)) s]"
  done; done
  python3 bench/results/v73/probe/ratios.py $R x n
  mkdir -p $R/rows && cp $R/rows_*.json $R/rows/ && (cd $R/rows && for f in rows_*; do mv $f layer_${f#rows_}; done) && python3 bench/results/v73/probe/ratios.py $R/rows x n
  for p in layer rows; do for act in bf16 nvfp4; do for v in x n; do grep '^digest' $R/${p}_${act}_${v}_r1.txt > $R/dig_${p}_${act}_$v.txt; done
    cmp -s $R/dig_${p}_${act}_x.txt $R/dig_${p}_${act}_n.txt && echo "$p $act digests equal ($(wc -l < $R/dig_${p}_${act}_x.txt))" || echo "$p $act digests DIFFER"; done; done
fi
done
gzip -f $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v88 call V3 (one H200): exp/combine8 after call V2 (whose only failures were the two wide gtests' outputs offset by 2
# bytes -- the layer requires a 16-byte aligned out, so that case is gone and the 8-row combine reads the biases
# element by element). BUNDLE v42: c9/{cli,gt}, m1/cli (main f27528e).
# The decode / pieces gtests and, beside them, memcheck of the two wide-path gtests; then gpt-oss T 96 / 128 A/B.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
( timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/c9/gt \
    --gtest_filter='MoeLayerDecode.WideCombineBothForms:MoeLayerDecode.WidePathMatchesTheComposition' > $R/memcheck.txt 2>&1
  echo "memcheck wide rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4 ) &
timeout 300 /tmp/c9/gt --gtest_filter='MoeLayerDecode.*:MoeLayerPieces.*:MoeLayerBiases.*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran|Failure" $R/gt.txt | head
wait
shape() { echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"; }
for r in 1 2; do for T in 96 128; do line="r$r gptoss T$T:"
  for v in m1 c9; do f=$R/ab_${v}_t${T}_r$r.txt
    timeout 60 /tmp/$v/cli layer $(shape) --tokens $T --act bf16 --weight-layout pieces --values checkpoint --iters 100 --warmup 10 > $f 2>&1
    line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"; done; echo "$line"; done; done
tar czf $OUT/${NAME:-v3}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

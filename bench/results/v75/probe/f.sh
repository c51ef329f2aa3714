#!/usr/bin/env bash
# v75 f (one H200): the fused W4A16 decode kernel (`f`, branch exp/decode-fused2) -- its decode gtests, then the layer
# suite's W4A16 decode cells on pieces against main's kernels (`y`), digests. BUNDLE=<tag> holding /tmp/f and /tmp/y.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
export FP4GEMM_CLI=/tmp/f/cli
timeout ${GTT:-45} /tmp/f/gt --gtest_filter="${GTF:-MoeLayerDecode.*:MoeLayerCases.*}" > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -8
export FP4GEMM_DIGEST=1
for v in f y; do
  timeout 40 /tmp/$v/cli bench --suite layer --act bf16 --weight-layout pieces --cases 8,9,15,16,22,23 --no-peers \
    --settle-ms 100 --json $R/layer_bf16_${v}_r1.json > $R/layer_bf16_${v}_r1.txt 2>&1 || echo "layer $v FAILED"
done
echo "[$((SECONDS - t0)) s]"; python3 bench/results/v73/probe/ratios.py $R f y
cmp -s <(grep '^digest' $R/layer_bf16_f_r1.txt) <(grep '^digest' $R/layer_bf16_y_r1.txt) && echo "digests equal ($(grep -c '^digest' $R/layer_bf16_f_r1.txt))" || echo "digests DIFFER"
gzip -f $R/*.txt; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v82 call I (carry .carry/v11: b1 = main + the W4A4 NVFP4 wide bound 24 -> 32 for experts over 4 MiB): the bound's
# gtest and the wide tests; then W4A4 NVFP4 gpt-oss-120b on pieces, the general path (--decode-tokens 8) against the
# layer's default, alternated, two rounds, T 24-40.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/v11/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/v11/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
timeout 200 /tmp/b1/gt --gtest_filter='MoeLayerDecode.DefaultBoundByTheLayer:MoeLayerDecode.WidePath*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/gt.txt | head
SH="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --act nvfp4 --weight-layout pieces --values checkpoint"
for r in 1 2; do for T in 24 28 32 33; do line="r$r T$T:"
  for d in 8 -1; do /tmp/b1/cli layer $SH --tokens $T --decode-tokens $d --iters 100 --warmup 10 > $R/t${T}_d${d}_r$r.txt 2>&1
    line="$line d$d $(grep -oE '^time: [0-9.]+' $R/t${T}_d${d}_r$r.txt | cut -d' ' -f2)"; done
  echo "$line $(grep -oE 'wide decode path for T <= [0-9]+' $R/t${T}_d-1_r$r.txt | head -1)"; done; done
gzip $R/*.txt; tar czf $OUT/i_bound.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

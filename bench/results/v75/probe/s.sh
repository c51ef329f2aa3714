#!/usr/bin/env bash
# v75 s (one H200): where the decode kernels stall, per SASS instruction -- ncu's source counters (warp-state
# samples per instruction) of both decode kernels, gpt-oss W4A16 pieces, T 8 and T 1, exported as CSV.
# BUNDLE=<tag> V=<build> (/tmp/<V>/cli from .carry/<tag>/b.tar.xz).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/s; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
for T in ${TS:-8 1}; do
  timeout 200 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats -f -o $R/k_T$T \
    /tmp/$V/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
    --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_T$T.log 2>&1 || echo "ncu T $T FAILED"
  ncu -i $R/k_T$T.ncu-rep --page source --csv --print-source sass > $R/src_T$T.csv 2> $R/src_T$T.err || echo "export T $T FAILED"
  ncu -i $R/k_T$T.ncu-rep --page details --csv > $R/details_T$T.csv 2>&1
  echo "T $T [$((SECONDS - t0)) s]"; ls -la $R | tail -4
done
head -c 600 $R/src_T8.csv; echo
gzip -f $R/*.csv $R/*.log 2>/dev/null
tar czf $OUT/s.tgz -C $OUT s && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v82: where the T 1 / 8 decode time goes on the evict_first build: the trace CLI (/tmp/<M>/cli_trace: main's
# tools/fp4gemm built with FP4GEMM_TRACE) prints the decode phase table after its timing (eager runs, L2 flushed).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-t1}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
B=/tmp/$M/cli_trace
for t in ${TS:-1 8}; do
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai \
    --weight-layout pieces --values checkpoint --iters 100 > $R/gptoss_t$t.txt 2>&1
  timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --weight-layout pieces \
    --values checkpoint --iters 100 > $R/qwen3_t$t.txt 2>&1
done
for f in $R/*.txt; do echo "== $(basename $f)"; grep -E "^time" $f; sed -n '/decode trace/,$p' $f | head -30; done
tar czf $OUT/${NAME:-trace}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v88 call F (one H200): branch exp/no-sc-fence -- the general kernel's split-K publish without __threadfence() (a
# MEMBAR.SC.GPU per published partial; the named barrier + thread 0's red.release.gpu order the partial's stores, as
# CUTLASS's GenericBarrier::arrive_inc does). BUNDLE v44: nf/cli (this branch), c9/cli (main 6efc626); PART=gt with
# BUNDLE v45 (nf/gt) runs the split-K / stream-K gtests; BUNDLE v46 = nf/cli alone (two CLIs did not fit the carry
# limit: each compresses to 16.6 MB, the tracked tree is ~39 MB), timed against earlier calls.
# The split-K / stream-K gtests on nf, then the A/B at the general path's cells (CLI layer, W4A16 pieces, 2 rounds).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
if [ "${PART:-ab}" = gt ]; then
timeout 100 /tmp/nf/gt --gtest_filter='MoeStreamK.*:MoeGluShapes.StreamKSplitTiles:MoeGluShapes.SplitLastRound:MoeGluPiecesShapes.*:MoeDeterminism.*:FusedSanitizer.SmallSplitKProblem' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -6
else
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in 1 2; do for cs in "gptoss 512" "qwen3 512" "qwen3 128" "gptoss 4096" "qwen3 4096"; do set -- $cs; line="r$r $1 T$2:"
  for v in c9 nf; do [ -x /tmp/$v/cli ] || continue; f=$R/${v}_$1_t$2_r$r.txt
    timeout 60 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --iters 100 --warmup 10 > $f 2>&1
    line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"; done; echo "$line"; done; done
if [ "${NCU:-0}" = 1 ]; then for cs in "gptoss 512" "qwen3 4096"; do set -- $cs
  timeout 100 ncu --clock-control none --print-kernel-base function -k regex:fused_grouped_gemm -c 2 \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum /tmp/nf/cli layer $(shape $1) --tokens $2 --act bf16 \
    --weight-layout pieces --values checkpoint --iters 1 --warmup 0 > $R/ncu_nf_$1_t$2.txt 2>&1
  echo "ncu $1 T$2: $(grep -E 'gpu__time|inst_executed' $R/ncu_nf_$1_t$2.txt | sed 's/  */ /g' | awk '{printf "%s %s  ", $1, $NF}')"
done; fi
fi
tar czf $OUT/${NAME:-f}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v71 a (one H200): branch exp/four-wg's gtests (.carry/v114t): the new four-consumer-warpgroup tests, every MoE / GLU /
# layer / pieces / tuning test, then memcheck of the four-warpgroup tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v114t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v114t/gt.xz > $G/gt; chmod +x $G/gt; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt 2>&1
timeout 200 $G/gt --gtest_filter='*ConsumerWarpgroups*:*FourWarpgroups*:*MoeTuning*:*MoePairedMainloop*:*StreamK*' > $R/gt_four.txt 2>&1
echo "gt four rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_four.txt | head -20
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
  --gtest_filter='*ConsumerWarpgroups*:*FourWarpgroupsShapes*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
timeout 230 $G/gt --gtest_filter='*Moe*:*Layer*:*Glu*:*Pieces*:*Fused*:-*ConsumerWarpgroups*:*FourWarpgroups*:*MoeTuning*:*MoePairedMainloop*:*StreamK*:*MoeRandom*' > $R/gt_moe.txt 2>&1
echo "gt moe rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_moe.txt | head -20
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

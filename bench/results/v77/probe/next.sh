#!/usr/bin/env bash
# v77 next (one H200): the next session's first calls, prepared in session 90 (carry .carry/v88 and .carry/v89).
#   bash next.sh stream   bench/micro/stream_pattern (the decode stream alone: ring depth, warps, chunk order, bulk
#                         copies, synthetic compute) and the trace builds of the no-math probe (tnm) and main (tm5):
#                         where the probe's 26.5 us at gpt-oss T 1 go
#   bash next.sh a4       exp/w4a4-fused (a4b) and exp/bulk-ring (br) against main (b0): decode gtests + memcheck on
#                         a4b, the decode cells A/B of all three (a4b: W4A4 NVFP4 is the "nvfp4" column, W4A16 must be
#                         unchanged -- its kernels are SASS-identical; br: weights in pieces by one bulk copy a chunk;
#                         s2 / s4: main's loop with 2- and 4-stage rings, exp/stream-probe -DDECODE_STAGES -- fewer bytes
#                         in flight, since more were slower; linear scales are wrong there at S != 3: their digests differ)
#   bash next.sh a4san    a4b's sanitizers (memcheck of the decode gtests, racecheck of W4A16 / W4A4 fused, synccheck)
#   bash next.sh br       br's decode gtests + memcheck and sanitizers (only if its A/B is worth it)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for mode in "$@"; do
if [ "$mode" = stream ]; then
  mkdir -p $OUT
  timeout 200 .carry/v88/stream_pattern > $OUT/stream_pattern.txt 2>&1; echo "stream_pattern rc $? [$((SECONDS - t0)) s]"
  cat $OUT/stream_pattern.txt | head -120
  BUNDLE=v88 M=tm5 TS="tnm tm5" FUSED=1 NAME=trace bash bench/results/v76/probe/m.sh trace
fi
if [ "$mode" = a4 ]; then
  BUNDLE=v89 VS="a4b br s2 s4 b0" bash bench/results/v74/probe/c.sh tests ab
fi
if [ "$mode" = br ]; then
  BUNDLE=v89 VS="br b0" bash bench/results/v74/probe/c.sh tests
  BUNDLE=v89 M=br NAME=brsan bash bench/results/v76/probe/m.sh san
fi
if [ "$mode" = a4san ]; then
  BUNDLE=v89 M=a4b NAME=san bash bench/results/v76/probe/m.sh san
fi
done
echo "next.sh done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v84 call G, prepared, not run (the session's device time was spent): the decode ring's weight codes on pieces as one
# bulk copy per chunk (probe/bulk_ring_probe.patch, branch exp/bulk-ring: lane 0 of each warp, one mbarrier per ring
# stage, the L2 evict_first hint kept; the scale words still cp.async; rows unchanged), from bench/micro/sm_bandwidth.cu's
# finding that bulk copies stream 4.5-7 % faster than the per-lane cp.async ring at the same shared memory.
# Build the bundle on the CPU machine (Release build of main, then of the patch; strip; tar; xz with a 192 MiB
# dictionary): p0 = main's CLI; bk = the patch's CLI and GPU tests. SASS checked on the CPU machine (cuobjdump from pip):
# no stack in any decode kernel; the pieces kernels +0..+10 registers (down_combine pieces 114 -> 124), +1-2 KB static
# shared memory; rows kernels unchanged. Reviewed by reading (a helper, PTX semantics): no hazard found; its one point -- copy
# on every chunk of the share rather than on lane 0's live flag -- is in the patch. Open: whether racecheck models bulk
# copies and mbarriers.
# Then: bk's decode / pieces tests (the bulk path in every pieces case), memcheck and racecheck of the wide, long-share
# and fused tests; p0 / bk timed, W4A16 and W4A4 NVFP4 on pieces.
cd "$(dirname "$0")/../../../.."
BUNDLE=${BUNDLE:-v29} M=bk MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' \
  SANF='MoeLayerDecode.WidePathMatchesTheComposition:MoeLayerDecode.LongShares*:MoeLayerDecode.FusedKernel*' \
  NAME=g_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=${BUNDLE:-v29} VS="p0 bk" ROUNDS=2 NCUCASES="gptoss 8;qwen3 64" NAME=g_ab16 \
  CASES="gptoss 1;gptoss 8;gptoss 16;gptoss 64;gptoss 128;qwen3 1;qwen3 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|^ncu|done"
BUNDLE=${BUNDLE:-v29} VS="p0 bk" ROUNDS=2 NCUCASES=" " NAME=g_ab44 ACT=nvfp4 \
  CASES="gptoss 1;gptoss 8;qwen3 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"

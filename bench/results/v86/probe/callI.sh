#!/usr/bin/env bash
# v86 call I, prepared, not run (the session's device time was spent): the wide kernel 1 for MXFP4 pieces by warpgroup
# wgmma (branch exp/wg-consume = probe/wg_consume.patch on main cfd22a8): A = the dequantised fragments from registers
# (mma.sync's layout), B = the slot's 8 token rows staged as 128-byte-swizzle atoms at the fragments' logical k; units
# of 64 rows shared by the CTA's 4 warpgroups (the 4 warps of one walk the same chunks, each its 16 rows); split units
# handed over per warp. Kernel 2 unchanged (mma.sync). Builds (CPU machine, nvcc 13.0, sm_90a; bundle .carry/v34):
# m1 = main f27528e's cli; wg = the branch (cli, gt; FP4GEMM_EXP_WG_N 1); wn2 / wn3 / wn4 = the same with wgmma
# m64n16 / n24 / n32 (timing only: the columns past 8 read the next atoms' rows and are only compared with a constant).
# SASS: the two wide MXFP4-pieces kernel-1 instantiations 8 HGMMA each (64x8 / 16 / 24 / 32), 108-115 registers, no
# stack. Predictions (v86 micro: wgmma G 1 = mma.sync G 1; each extra group ~5-7 % of a chunk's compute): wg within
# +-3 % of m1 at gpt-oss T 16-128 and Qwen3 T 16-64 (kernel 1 only changes; 64-row units coarsen the shares); wn2-wn4
# +2..+8 % over wg (against mma.sync groups' +9..+12 % each, v86 h_groups). If wg fails its tests: the likeliest
# culprits are the logical-k staging (decode::wg_logical_of_stored / wg_staged_byte) or the A-fragment order of wgmma.
# PART=1 (~6 min): wg's wide-path / pieces gtests, memcheck + racecheck of the wide-path tests. PART=2 (~4 min): A/B
# m1 / wg / wn2 / wn3 / wn4 at gpt-oss T 16 / 64 / 128 and Qwen3 T 16 / 64 (W4A16 pieces, L2 flushed, median of 100,
# 2 rounds); W4A4 MXFP4 gpt-oss T 64; ncu of the wide kernels (m1 / wg / wn4); the consume micro with its dequant mode.
# Rebuilding the bundle (if .carry/v34 is gone): build main (Release, tests + tools) -> m1/cli; check out
# exp/wg-consume and build -> wg/cli, wg/gt; for N in 2 3 4: re-run ninja's nvcc line for decode_layer.cu.o with
# -DFP4GEMM_EXP_WG_N=N added, then the last two lines of `ninja -t commands tools/fp4gemm` (archive + link; running
# ninja itself would rebuild the object) -> wnN/cli; micro/consume_groups from bench/micro/consume_groups.cu (its
# header); strip all; tar cf - m1 wg wn2 wn3 wn4 micro | xz -T2 --lzma2=preset=6,dict=192MiB > .carry/v34/b.tar.xz.
cd "$(dirname "$0")/../../../.."
if [ "${PART:-1}" = 1 ]; then  # (~6 min: tests, memcheck, racecheck with its 200 s cap)
BUNDLE=${BUNDLE:-v34} M=wg MODES=tests GTT=300 GF='MoeLayerDecode.Wide*:MoeLayerPieces.*' \
  SANF='MoeLayerDecode.WidePathMatchesTheComposition:MoeLayerDecode.WidePathAtTheLargestStaging' \
  NAME=i_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
fi
if [ "${PART:-1}" = 2 ]; then  # (~4 min: A/B, ncu, the micro)
BUNDLE=${BUNDLE:-v34} VS="m1 wg wn2 wn3 wn4" ROUNDS=2 NCUCASES=" " NAME=i_ab16 \
  CASES="gptoss 16;gptoss 64;gptoss 128;qwen3 16;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done|\["
BUNDLE=${BUNDLE:-v34} VS="m1 wg" ROUNDS=1 NCUCASES=" " NAME=i_ab44 ACT=mxfp4 \
  CASES="gptoss 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done|\["
BUNDLE=${BUNDLE:-v34} VS="m1 wg wn4" CASES="qwen3 gptoss" NAME=i_ncu bash bench/results/v85/probe/ncu_pipes.sh 2>&1 | \
  grep -E "^==|decode_|gpu__time|inst_executed.sum|issue_active|hmma" | head -80
# the consume micro again, now with its dequant-only mode (what the 221 cycles per chunk at G 1 are made of)
/tmp/micro/consume_groups 8192 | tail -10
fi

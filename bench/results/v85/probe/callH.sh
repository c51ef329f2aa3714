#!/usr/bin/env bash
# v85 call H, prepared, not run (the session's device time was spent): the decode kernels' unit change made cheaper
# (probe/fastdiv_units.patch = the wide-path guards of 19b0422 + FastDiv, branch exp/fastdiv-units): a unit's slot / block by FastDiv (src/device/fast_div.hpp:
# the divisor's reciprocal formed once per kernel, each quotient a multiply-high and one correction; host test
# tests/host/test_fast_div.cpp passed on the CPU machine) instead of the compiler's per-use unsigned division, and the
# cursor's scale offsets in unsigned arithmetic. SASS (cuobjdump, CPU machine, nvcc 13.0): every decode kernel's loop
# 30-70 instructions shorter, stacks 0; the wide kernel 2's unit change (copy side + store + multiply side) ~240 -> ~180
# instructions. Prediction (from v85's finding that the loop is issue-bound: +4.4 % instructions cost +11.7 % time):
# Qwen3-30B-A3B T 64 (kernel 2: a unit every 6 chunks, ~10 fewer instructions per chunk of ~205) 115 -> ~111-112 µs,
# T 16-32 likewise -2..-3 %; gpt-oss-120b (a unit every 22.5 chunks) -0.5..-1 %; T 1 unchanged.
# Second, the per-group cost of a variable-group wide slot (probe/groups_probe.patch, branch exp/groups-probe): builds
# g2 / g3 / g4 with FP4GEMM_EXP_GROUPS 2 / 3 / 4 -- every dequantised fragment multiplied G times, each extra group
# against its own shared-memory activation load into one accumulator of its own (timing only; the tests still pass:
# the extra sums are only compared with a constant). SASS: HMMA 512 / 864 / 1216 / 1568 in decode_layer.cu.o, no
# stack, the wide kernels <= 118 registers at G 4. Prediction: +8..+10 % per group (v85's c16 probe, two accumulators).
# gl2 / gl3 / gl4: the same with the extra groups read through L1 from global rows (FP4GEMM_EXP_GROUPS_L1 1; at G 4
# the wide kernels reach 128 registers and spill 8-24 bytes: SASS). Two device calls: PART=1 (FastDiv: tests, A/B,
# ncu; ~6 min) and PART=2 (the groups probe; ~5 min).
# Bundle (CPU machine; .carry/v32 built in session 98 if this machine still has it): p0 = 19b0422's cli (main plus the wide-path
# guards, reverted on main until a GPU run; the fd branch carries them, so p0 / fd isolates FastDiv); fd = the fastdiv
# branch's cli and gt; g2-g4, gl2-gl4 the groups probe's cli (strip; tar cf - p0/cli fd g2 g3 g4 gl2 gl3 gl4 | xz -T1
# --lzma2=preset=6,dict=192MiB > .carry/v32/b.tar.xz; carry .carry/v32).
cd "$(dirname "$0")/../../../.."
if [ "${PART:-1}" = 1 ]; then
BUNDLE=${BUNDLE:-v32} M=fd MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*:MoeLayer.*Decode*' \
  SANF='MoeLayerDecode.WidePathMatchesTheComposition:MoeLayerDecode.FusedKernel*' \
  NAME=h_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=${BUNDLE:-v32} VS="p0 fd" ROUNDS=2 NCUCASES=" " NAME=h_ab16 \
  CASES="gptoss 1;gptoss 8;gptoss 64;gptoss 128;qwen3 1;qwen3 8;qwen3 16;qwen3 32;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
BUNDLE=${BUNDLE:-v32} VS="p0 fd" ROUNDS=2 NCUCASES=" " NAME=h_ab44 ACT=nvfp4 \
  CASES="gptoss 8;qwen3 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
BUNDLE=${BUNDLE:-v32} VS="p0 fd" ROUNDS=1 NCUCASES=" " NAME=h_rows WL=rows \
  CASES="gptoss 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
BUNDLE=${BUNDLE:-v32} VS="p0 fd" CASES="qwen3 gptoss" NAME=h_ncu bash bench/results/v85/probe/ncu_pipes.sh 2>&1 | \
  grep -E "^==|decode_|gpu__time|inst_executed.sum|issue_active" | head -60
fi
if [ "${PART:-1}" = 2 ]; then
BUNDLE=${BUNDLE:-v32} VS="p0 g2 gl2 g3 gl3 g4 gl4" ROUNDS=2 NCUCASES=" " NAME=h_groups \
  CASES="gptoss 16;gptoss 64;gptoss 128;qwen3 16;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
fi

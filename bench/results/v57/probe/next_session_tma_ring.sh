#!/usr/bin/env bash
# For the next session (one H200, ~1 min): does a per-warp TMA ring in shared memory (stages of 16 rows x 128 B, two
# 8 x 128 B boxes with SWIZZLE_128B, an mbarrier per stage, lane 0 issues; 54 registers) feed the decode kernels' chunk
# math faster than today's 3-deep register ring (77 registers here)? stream5.cu runs both with the same math
# (e2m1 -> bf16, a multiply per pair, 8 mma.sync per chunk) on gpt-oss / Qwen3 row lengths, L2 flushed by a memset,
# and checks that every thread's sums are identical between the rings (random bytes; past the row: zeros in both).
# If a TMA ring wins here by more than ~10 %, build it into decode::walk_share (the ring outside the registers also
# frees ~24 registers a thread: 20-24 warps per SM become possible). Carry nothing (it compiles here; or carry .carry/mb5).
set -uo pipefail
cd "$(dirname "$0")"
B=${CARRIED:-../../../../.carry/mb5/stream5}
[ -x "$B" ] || { nvcc -O3 -arch=sm_90a -std=c++17 -o $OUT/stream5 stream5.cu && B=$OUT/stream5; }
$B 2>&1 | tee $OUT/stream5.txt

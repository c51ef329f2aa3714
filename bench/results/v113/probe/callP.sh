#!/usr/bin/env bash
# v113 call P (prepared for the next session; whichever GPU comes; no build there): exp/prologue2 (p) against main
# 050ed63's build (n). 1. The schedule micro: .carry/ms/new (050ed63) and .carry/ms/new72 (exp/prologue2), 2 runs.
# 2. v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests), ROUNDS (3) alternating n / p.
# 3. p's C++ GPU tier (3 shards), memcheck (the MoE / layer / pieces filter), racecheck / synccheck on two MoE tests.
# Carry .carry/ms, .carry/nw_cli.tar.xz, .carry/p2_build.tar.xz (exp/prologue2's CLI + tests; build folder /work/mb)
# with trim.sh out.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab $OUT/m; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
for r in 1 2; do for b in new new72; do .carry/ms/$b 20 > $W/m_${b}_r$r.txt 2>&1; echo "micro $b r$r rc $?"; done; done
paste <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $1 "|" $2}' $W/m_new_r2.txt) <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $2 "|" $4}' $W/m_new72_r2.txt)
mkdir -p .carry/build /tmp/ab/n /tmp/ab/p /tmp/xn && xz -dc .carry/nw_cli.tar.xz | tar xf - -C /tmp/xn && \
  xz -dc .carry/p2_build.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
ln -sf /tmp/xn/tools/fp4gemm /tmp/ab/n/fp4gemm; ln -sf $PWD/.carry/build/tools/fp4gemm /tmp/ab/p/fp4gemm
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab n p | tail -24
echo "ab done [$((SECONDS - t0)) s]"
tar czf $OUT/cP_ab_micro.tgz -C $OUT w && rm -rf $W
[ -n "${NO_TESTS:-}" ] && exit 0
# (the tier and sanitizers: v114's callT.sh; its filters also name tests only exp/split-wider2 has, which match nothing here)
BUILD=p2_build OUT=$OUT bash bench/results/v114/probe/callT.sh

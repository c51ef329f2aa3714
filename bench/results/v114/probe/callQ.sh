#!/usr/bin/env bash
# v114 call Q (whichever GPU comes; no build there).
# 1. On an H200 only: issue 52's table on main 050ed63's CPU-built CPython 3.12 extension (v95's table.sh, two
#    sustained rounds of 100 of bench/tk_layer_pieces.py, triton_kernels' layer in the same run; no Humming).
# 2. exp/prologue2 8e0f079 (p: the class split's search in 3 rounds of 72 points) against 050ed63 (n): the schedule
#    micro (.carry/ms/new vs new72, 2 runs) and v106's ab3.sh layer A/B (W4A16 pieces, checkpoint scales, digests),
#    ROUNDS (3) alternating n / p, on the cells past the decode path (T >= 128) and one decode cell of each model as a control.
# Carry .carry/peers .carry/ms .carry/nw_cli.tar.xz .carry/p2_cli.tar.xz .carry/nw_ext312.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $name == *H200* && -z ${NO_TABLE:-} ]]; then
  B=/tmp/b; mkdir -p $B/python
  xz -dc .carry/nw_cli.tar.xz | tar xf - -C $B && xz -dc .carry/nw_ext312.tar.xz | tar xf - -C $B/python && touch $B/built
  ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 SMOKE=0 NAME=q_table_h200 bash bench/results/v95/probe/table.sh
  echo "table done [$((SECONDS - t0)) s]"
fi
for r in 1 2; do for b in new new72; do .carry/ms/$b 20 > $W/m_${b}_r$r.txt 2>&1; echo "micro $b r$r rc $?"; done; done
paste <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $1 "|" $2}' $W/m_new_r2.txt) <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $2 "|" $4}' $W/m_new72_r2.txt)
mkdir -p /tmp/ab/n /tmp/ab/p /tmp/xn /tmp/xp && xz -dc .carry/nw_cli.tar.xz | tar xf - -C /tmp/xn && \
  xz -dc .carry/p2_cli.tar.xz | tar xf - -C /tmp/xp || { echo "unpack failed"; exit 3; }
ln -sf /tmp/xn/tools/fp4gemm /tmp/ab/n/fp4gemm; ln -sf /tmp/xp/tools/fp4gemm /tmp/ab/p/fp4gemm
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-9,11,12,13,14,32,16,18,19,20,21,34} $W/ab n p | tail -24
echo "ab done [$((SECONDS - t0)) s]"
tar czf $OUT/cQ_ab_micro.tgz -C $OUT w && rm -rf $W
echo "all done [$((SECONDS - t0)) s]"

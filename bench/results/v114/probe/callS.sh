#!/usr/bin/env bash
# v114 call S (prepared; whichever GPU comes; no build there): three CPU-built CLIs, v106's ab3.sh on the layer suite
# (W4A16 pieces, checkpoint scales, digests), ROUNDS (3) alternating: n = main 050ed63, p = exp/prologue2 8e0f079 (the
# class split's search in 3 rounds of 72 points), s = exp/split-wider2 (stream-K for the 48-token class too). CASES
# default: every cell of both models (the decode cells, T <= 64, run other kernels: controls).
# Then (if carried) the schedule micro: .carry/ms/new vs new72.
# Carry .carry/nw_cli.tar.xz .carry/p2_cli.tar.xz .carry/sw_cli.tar.xz [.carry/ms] (trim.sh out first).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
for b in n:nw_cli p:p2_cli s:sw_cli; do
  x=${b%%:*} f=${b#*:}; mkdir -p /tmp/x$x /tmp/ab/$x
  xz -dc .carry/$f.tar.xz | tar xf - -C /tmp/x$x || { echo "unpack $f failed"; exit 3; }
  ln -sf /tmp/x$x/tools/fp4gemm /tmp/ab/$x/fp4gemm
done
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab n p s | tail -24
echo "ab done [$((SECONDS - t0)) s]"
if [ -x .carry/ms/new ]; then
  for r in 1 2; do for b in new new72; do .carry/ms/$b 20 > $W/m_${b}_r$r.txt 2>&1; echo "micro $b r$r rc $?"; done; done
  paste <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $1 "|" $2}' $W/m_new_r2.txt) <(awk -F'|' '/^(Qwen3|gpt-oss)/ {print $2 "|" $4}' $W/m_new72_r2.txt)
fi
tar czf $OUT/cS_ab.tgz -C $OUT w && rm -rf $W
echo "all done [$((SECONDS - t0)) s]"

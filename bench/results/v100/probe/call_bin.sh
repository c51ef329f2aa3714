#!/usr/bin/env bash
# v100 (session 113): exp/producer-gather2 timed from binaries built on the CPU machine (nvcc 13.0, sm_90a; the
# device budget left no room for a build there), carried one per call (the working tree's 64 MiB cannot hold both;
# /tmp/pg keeps the first call's while the machine stays warm):
#   .carry/pg_d.tar.xz  d/fp4gemm  the branch's CLI (glu-build/tools/fp4gemm)
#   .carry/pg_m.tar.xz  m/fp4gemm  main's CLI (main-build/tools/fp4gemm)
# Arms: m = main; e = the branch with FP4GEMM_EXP_PREPASS_GATHER=1 (the pre-pass gathers, as on main, with the
# branch's code); d = the branch (the GEMM's activation warp gathers); f = the branch with
# FP4GEMM_EXP_GATHER_WARPS=2 (producer warps 2 and 3 gather; the branch head ac5b11d only: EXTRA_ARMS="" drops
# it for older binaries), or the setting F_ENV names (v101's call_bin.sh runs this script with its own).
# Each call: an A/B round over the arms whose binaries are in /tmp/pg (CLI `layer`, W4A16 pieces, checkpoint
# scales, the prefill cells and Qwen3 T 128, order alternating by round), then the layer suite's digests (bf16)
# of each gathering arm not yet digested (m, d, f; e runs main's path), each compared with main's.
# Logs: /tmp/pb, tarred into $OUT/pb.tgz (at most 8 files come back).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=/tmp/pb; mkdir -p $A /tmp/pg
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a $A/gpu.txt
for t in .carry/pg_*.tar.xz; do [ -f "$t" ] && tar xJf "$t" -C /tmp/pg; done
arms=""; [ -x /tmp/pg/m/fp4gemm ] && arms="m"; [ -x /tmp/pg/d/fp4gemm ] && arms="$arms e d${EXTRA_ARMS- f}"
echo "arms: $arms"
fin() { tar czf $OUT/pb.tgz -C /tmp pb; }
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai";; esac; }
cli_of() { if [ $1 = m ]; then echo /tmp/pg/m/fp4gemm; else echo /tmp/pg/d/fp4gemm; fi; }
env_of() {
  unset FP4GEMM_EXP_PREPASS_GATHER FP4GEMM_EXP_GATHER_WARPS FP4GEMM_EXP_NO_CFENCE
  case $1 in e) export FP4GEMM_EXP_PREPASS_GATHER=1;; f) export ${F_ENV:-FP4GEMM_EXP_GATHER_WARPS=2};; esac
}
R=${ROUND:-1}
IFS=';' read -ra CL <<< "${CELLS:-qwen3 4096;gptoss 4096;qwen3 512;gptoss 512;qwen3 1024;qwen3 128}"
for cs in "${CL[@]}"; do
  set -- $cs; line="r$R $1 T$2:"
  order=$arms; [ $((R % 2)) = 0 ] && order=$(echo $arms | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do
    f=$A/${v}_$1_t$2_r$R.txt; env_of $v
    timeout 60 $(cli_of $v) layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
      --iters 100 --warmup 10 > $f 2>&1
    line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done
  echo "$line [$((SECONDS - t0)) s]"
done | tee -a $A/ab.txt; fin
for v in $arms; do
  [ $v = e ] && continue; [ -f /tmp/d_$v ] && continue; env_of $v
  FP4GEMM_DIGEST=1 timeout 60 $(cli_of $v) bench --suite layer --act bf16 --weight-layout pieces --no-peers > $A/suite_layer_$v.txt 2>&1
  echo "suite layer bf16 ($v) rc $? [$((SECONDS - t0)) s]"
  grep -i "digest" $A/suite_layer_$v.txt | sed 's/  */ /g' > /tmp/d_$v
done
for v in d f; do
  [ -f /tmp/d_m ] && [ -f /tmp/d_$v ] && echo "digests layer bf16 m / $v: $(wc -l < /tmp/d_m) / $(wc -l < /tmp/d_$v) lines, differing: $(diff /tmp/d_m /tmp/d_$v | grep -c '^<')" | tee -a $A/digests.txt
done
fin; echo "done [$((SECONDS - t0)) s]"

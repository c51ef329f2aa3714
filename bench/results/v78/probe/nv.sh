#!/usr/bin/env bash
# v78: where W4A4 NVFP4's decode time goes against W4A16's (trace build tm5 = main + FP4GEMM_TRACE, carry .carry/${BUNDLE:-v88}):
# the per-phase trace of both, and ncu of every decode-path kernel (decode_*, fake_quantize_rows) at T 1 / 8.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; NCU=${NCU:-1}; mkdir -p $R
H=$(md5sum < .carry/${BUNDLE:-v88}/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/${BUNDLE:-v88}/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
B=/tmp/${TB:-tm5}/cli
[ -n "${NOTRACE:-}" ] || for c in "128 2880 2880 4 swigluoai 1" "128 2880 2880 4 swigluoai 8" "128 2048 768 8 silu 1" "128 2048 768 8 silu 8"; do set -- $c
  for act in ${ACTS:-bf16 nvfp4}; do
    timeout 60 $B layer --experts $1 --hidden $2 --inter $3 --topk $4 --activation $5 --tokens $6 --act $act \
      --weight-layout pieces --iters 20 --warmup 5 > $R/trace_${act}_H$2_T$6.txt 2>&1 || echo "trace $c $act FAILED"
  done
done
for f in $R/trace_*; do echo "== $(basename $f)"; grep -E "^time|  kernel" $f | grep -vE "entry|cta share|cursor"; done
echo "trace [$((SECONDS - t0)) s]"
[ "$NCU" = 1 ] || { echo skip ncu; }
M='gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,regex:smsp__average_warps_issue_stalled_(long_scoreboard|barrier|wait|short_scoreboard|math_pipe_throttle|mio_throttle|lg_throttle|no_instruction|not_selected|selected|dispatch_stall|membar|sleeping|branch_resolving|drain|imc_miss|tex_throttle)_per_issue_active\.ratio'
[ "$NCU" = 1 ] && for c in ${NCU_CASES:-"128 2880 2880 4 swigluoai 1" "128 2048 768 8 silu 1" "128 2880 2880 4 swigluoai 8"}; do set -- $c
  for act in ${ACTS:-bf16 nvfp4}; do
    timeout 120 ncu --clock-control none --kernel-name regex:'decode_|fake_quant' --launch-count 14 --metrics "$M" \
      $B layer --experts $1 --hidden $2 --inter $3 --topk $4 --activation $5 --tokens $6 --act $act \
      --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_${act}_H$2_T$6.txt 2>&1 || echo "ncu $c $act FAILED"
  done
done
echo "ncu [$((SECONDS - t0)) s]"
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-nv}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

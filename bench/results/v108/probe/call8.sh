#!/usr/bin/env bash
# v108 call 8 (prepared, not run; any GPU, ~60 s): where the general MoE GEMMs' warps stall, per SASS instruction.
# ncu --clock-control none with SourceCounters and WarpStateStats on main's carried CLI (.carry/main_cli.tar.xz),
# gpt-oss layer W4A16 pieces at CELLS (default T 512 and 4096), the second GEMM1 / GEMM2 launches; each report is also
# exported as the per-instruction source page (SASS, CSV) so the stall reason of the first HGMMA after each decode
# can be read on the CPU machine. Carry .carry/main_cli.tar.xz (trim.sh out with KEEP="v95 v102 v106 v108").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/src; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
mkdir -p /tmp/xm && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm; C=/tmp/xm/tools/fp4gemm
IFS=, read -ra CL <<< "${CELLS:-512,4096}"
for T in "${CL[@]}"; do
  timeout ${NT:-90} ncu --clock-control none --kernel-name regex:fused_grouped_gemm --launch-skip 2 --launch-count 2 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats -o $R/gptoss_t$T -f \
    $C layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --tokens $T --act bf16 \
    --weight-layout pieces --values checkpoint --iters 2 --warmup 1 > $R/gptoss_t$T.log 2>&1
  echo "T$T rc $? [$((SECONDS - t0)) s]"
  ncu --import $R/gptoss_t$T.ncu-rep --page details --print-details all > $R/gptoss_t${T}_details.txt 2>&1
  ncu --import $R/gptoss_t$T.ncu-rep --page source --csv --print-source sass > $R/gptoss_t${T}_sass.csv 2>&1
  echo "  $(wc -l < $R/gptoss_t${T}_sass.csv) SASS rows"
done
echo "all done [$((SECONDS - t0)) s]"

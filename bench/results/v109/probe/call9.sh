#!/usr/bin/env bash
# v109 call 9: on an H200, v108's call6.sh (issue 52's H200 table on main with v103's W4A16 trigger, triton_kernels'
# layer in the same run, then the W4A4 NVFP4 cells; it builds on the machine unless call10.sh laid out a carried
# build), then, if that left time (NCU_BY, 380 s), the stall samples below. On any other card only the stall samples:
# v108 call8's measurement (ncu --clock-control none, per-SASS-instruction stall samples, speed of light and memory
# workload of the general MoE GEMMs, gpt-oss W4A16 pieces at CELLS, default T 512 / 4096) with the laid-out CLI, else
# the carried CPU-built one (.carry/main_cli.tar.xz), else one built here. Carry .carry/peers (and the builds).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in  # (on an H200, the stall samples too if the table left time for them)
  *H200*) ROUND_REPS="${ROUND_REPS:-100 100}" MAXB=${MAXB:-260} bash bench/results/v108/probe/call6.sh
          [ $((SECONDS - t0)) -lt ${NCU_BY:-380} ] || exit 0 ;;
esac
if [ -x /tmp/b/tools/fp4gemm ]; then C=/tmp/b/tools/fp4gemm  # (call10.sh laid out the carried CLI)
elif [ -f .carry/main_cli.tar.xz ]; then  # (the CPU-built CLI of this commit, if carried)
  mkdir -p /tmp/xm && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm; C=/tmp/xm/tools/fp4gemm
else PHASE=build HM=0 SMOKE=0 NAME=build9 bash bench/results/v95/probe/table.sh; C=/tmp/b/tools/fp4gemm; fi
[ -x $C ] || { echo "no CLI"; exit 3; }
R=$OUT/src; mkdir -p $R
IFS=, read -ra CL <<< "${CELLS:-512,4096}"
for T in "${CL[@]}"; do
  timeout ${NT:-90} ncu --clock-control none --kernel-name regex:fused_grouped_gemm --launch-skip 2 --launch-count 2 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section MemoryWorkloadAnalysis -o $R/gptoss_t$T -f \
    $C layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --tokens $T --act bf16 \
    --weight-layout pieces --values checkpoint --iters 2 --warmup 1 > $R/gptoss_t$T.log 2>&1
  echo "T$T rc $? [$((SECONDS - t0)) s]"
  ncu --import $R/gptoss_t$T.ncu-rep --page details --print-details all > $R/gptoss_t${T}_details.txt 2>&1
  ncu --import $R/gptoss_t$T.ncu-rep --page source --csv --print-source sass > $R/gptoss_t${T}_sass.csv 2>&1
  echo "  $(wc -l < $R/gptoss_t${T}_sass.csv) SASS rows"; head -c 600 $R/gptoss_t${T}_sass.csv; echo
  grep -E "fused_grouped_gemm|Duration|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Compute \\(SM\\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Eligible Warps" $R/gptoss_t${T}_details.txt | sed -E "s/ +/ /g" | head -30
done
cuobjdump -sass $C > /dev/null 2>&1; echo "all done [$((SECONDS - t0)) s]"

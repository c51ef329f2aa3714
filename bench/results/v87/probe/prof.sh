#!/usr/bin/env bash
# v87 call P (one H200): where the general path's time goes at T 512 / 4096 (issue 52's cells furthest from target),
# main f27528e's CLI (m1 in BUNDLE v34). A: ncu per kernel of one eager layer run, fp4gemm (W4A16 on pieces, checkpoint
# scales); B: ncu of triton_kernels' layer kernels at T 4096 (tk_layer.py, same metrics); C: the host schedule's knobs
# (Tuning's env variables) swept at T 512 / 4096, CLI layer, L2 flushed, median of 100.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-m1}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
MET=${MET:-gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size}
short() { grep -E "^  [A-Za-z_].*\(|stalled|gpu__time|inst_executed.sum|issue_active|tensor|per_second|dram__|registers|warps_active|grid_size|block_size" "$1" | sed 's/  */ /g'; }
if [[ " ${PARTS:-A B C} " == *" A "* ]]; then
IFS=';' read -ra AC <<< "${ACASES:-gptoss 512;gptoss 4096;qwen3 512;qwen3 4096}"
for cs in "${AC[@]}"; do set -- $cs
  f=$R/ncu_$1_t$2.txt
  timeout 120 ncu --clock-control none --print-kernel-base function -k regex:"${AK:-.}" -c ${ACNT:-24} --metrics $MET \
    /tmp/$M/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --iters 1 --warmup 0 > $f 2>&1
  echo "== A $1 T$2 rc $? [$((SECONDS - t0)) s]"; short $f | head -${AH:-90}
done
fi
if [[ " ${PARTS:-A B C} " == *" B "* ]]; then
for s in gpt-oss Qwen3; do
  f=$R/ncu_tk_$s.txt
  PYTHONPATH=$PWD/.peers TKL_SHAPES=$s TKL_TOKENS=${BT:-4096} TKL_REPS=3 TKL_SILU=0 TKL_BUDGET_S=100 timeout 170 \
    ncu --clock-control none --print-kernel-base function -k regex:"${BK:-matmul|reduce|topk|bitmatrix|combine|finalize|scatter|gather}" -c ${BC:-16} --metrics $MET \
    python3 .peers/tk_layer.py > $f 2>&1
  echo "== B tk $s rc $? [$((SECONDS - t0)) s]"; short $f | head -100
done
fi
if [[ " ${PARTS:-A B C} " == *" C "* ]]; then
IFS=';' read -ra CC <<< "${CCASES:-gptoss 512;qwen3 512;gptoss 4096;qwen3 4096}"
VARS=${VARS:-"- FP4GEMM_TILE_TOKENS=32 FP4GEMM_TILE_TOKENS=64 FP4GEMM_TILE_TOKENS=128 FP4GEMM_TILE_TOKENS=256 FP4GEMM_NARROW_ROWS=128 FP4GEMM_NARROW_ROWS=256 FP4GEMM_SPLIT_K=0 FP4GEMM_SPLIT_K=1 FP4GEMM_TMA_STORE=0 FP4GEMM_TMA_STORE=1"}
for cs in "${CC[@]}"; do set -- $cs; line="C $1 T$2:"
  for v in $VARS; do
    f=$R/c_$1_t$2_${v//=/_}.txt
    if [ "$v" = - ]; then timeout 60 /tmp/$M/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --iters 100 --warmup 10 > $f 2>&1
    else env $v timeout 60 /tmp/$M/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --iters 100 --warmup 10 > $f 2>&1; fi
    line="$line ${v#FP4GEMM_} $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done
  echo "$line [$((SECONDS - t0)) s]"
done
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/${NAME:-prof}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v104 (optional, after split_call.sh): ncu source counters (per SASS instruction: executed counts, stall samples) of
# the general GEMM1 / GEMM2 at Qwen3-30B-A3B and gpt-oss-120b T 512, W4A16 pieces, both arms of the carried knob CLI
# (.carry/both_split.tar.xz: pg/fp4gemm; FP4GEMM_EXP_SPLIT_SCALES 0 / 1): whether the scale warp stops pacing GEMM2
# and what paces it then (the per-warp reading of v89's profile: PERF.md v104). Same method as v89's probe/callP.sh.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
tar xJf ${PG:-.carry/both_split.tar.xz} -C /tmp pg
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
for model in ${MODELS:-qwen3 gptoss}; do
  if [ $model = qwen3 ]; then dims="--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu"
  else dims="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"; fi
  for arm in 0 1; do
    FP4GEMM_EXP_SPLIT_SCALES=$arm timeout 200 ncu --clock-control none -k regex:fused_grouped_gemm -c 2 \
      --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no -o $R/rep_${model}_$arm -f \
      /tmp/pg/fp4gemm layer $dims --tokens ${T:-512} --act bf16 --weight-layout pieces --values checkpoint --iters 1 \
      --warmup 0 > $R/ncu_${model}_$arm.log 2>&1
    echo "ncu $model arm $arm rc $? [$((SECONDS - t0)) s]"
    for id in 0 1; do
      timeout 120 ncu -i $R/rep_${model}_$arm.ncu-rep --page source --csv --print-source sass --launch-skip $id \
        --launch-count 1 > $R/src_${model}_${arm}_k$id.csv 2>/dev/null
    done
    timeout 60 ncu -i $R/rep_${model}_$arm.ncu-rep --page details --print-details all > $R/details_${model}_$arm.txt 2>&1
    rm -f $R/rep_${model}_$arm.ncu-rep
  done
done
grep -h "Duration" $R/details_*.txt | head -8
tar cf - -C $OUT r | xz -6 -T4 > $OUT/prof_split.tar.xz && rm -rf $R; ls -la $OUT; echo "done [$((SECONDS - t0)) s]"

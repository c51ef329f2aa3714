#!/usr/bin/env bash
# racecheck of the decode kernels with the decode path forced (--decode-tokens 8: up to 64 pairs), and the phase trace
# of the final tree (.carry/v56/fp4gemm_trace: decode_layer.cu with FP4GEMM_TRACE).
set -uo pipefail
R=$OUT/r; mkdir -p $R; B=.carry/build/tools/fp4gemm
i=0
for a in "--experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --act bf16" \
         "--experts 12 --hidden 256 --inter 128 --topk 8 --tokens 5 --act nvfp4 --activation swigluoai"; do
  i=$((i+1))
  timeout 150 compute-sanitizer --tool racecheck $B layer $a --decode-tokens 8 --iters 1 --warmup 1 > $R/race_$i.log 2>&1; echo "race $i rc=$?"
  grep -E "decode path|SUMMARY" $R/race_$i.log | grep -o "decode path for T <= [0-9]*\|RACECHECK SUMMARY.*" | sort | uniq -c
done
tar czf $OUT/r.tgz -C $OUT r
T=.carry/v56/fp4gemm_trace
timeout 60 $T layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act bf16 --activation swigluoai --iters 100 > $R/trace_gptoss_t1.txt 2>&1
timeout 60 $T layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 8 --act bf16 --iters 100 > $R/trace_qwen3_t8.txt 2>&1
tar czf $OUT/r.tgz -C $OUT r

#!/usr/bin/env bash
# v54 call 4 (one H200): branch decode-warps2 (main aa172c4 + per-kernel warp counts, FP4GEMM_DECODE_WARPS=w1,w2).
# Tests at 24,24 and 16,24; layer suite cases 1,8,9,15,16,22 bf16/nvfp4 and `layer` Qwen3 / gpt-oss T 2, 4 (bf16)
# for each of 16,16 / 16,24 / 24,16 / 24,24, 2 interleaved rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v54/gpu_tests_W; B=.carry/v54/fp4gemm_W
for w in 24,24 16,24; do
  FP4GEMM_DECODE_WARPS=$w timeout 120 $T --gtest_filter='MoeLayerDecode*:MoeLayerBiases*:MoeLayerGraph*' > $R/gtest_$w.log 2>&1; echo "gtest $w rc=$?" | tee -a $R/rc.txt
done
FP4GEMM_DECODE_WARPS=24,24 timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode.EveryTokenCount*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt
tail -1 $R/memcheck.log; snap tests
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for w in 16,16 16,24 24,16 24,24; do
  for act in bf16 nvfp4; do
    FP4GEMM_DECODE_WARPS=$w timeout 100 $B bench --suite layer --act $act --cases 1,8,9,15,16,22 --settle-ms 100 \
      > $R/layer_${act}_${w/,/_}_$rnd.txt 2>&1
  done
  for t in 2 4; do
    FP4GEMM_DECODE_WARPS=$w timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 \
      --iters 100 > $R/q3_t${t}_${w/,/_}_$rnd.txt 2>&1
    FP4GEMM_DECODE_WARPS=$w timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 \
      --activation swigluoai --iters 100 > $R/go_t${t}_${w/,/_}_$rnd.txt 2>&1
  done
  snap "round $rnd $w"
done; done

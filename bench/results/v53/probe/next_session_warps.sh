#!/usr/bin/env bash
# For the next session (one H200, ~2 min): branch exp/decode-warps -- the decode kernels instantiated for 16 warps x
# a 3-deep register ring (main's), 20 x 3 and 24 x 2 (96 / 80 registers, no stack), picked at plan time by
# FP4GEMM_DECODE_WARPS. v53's ncu found the 16-warp kernels issue-bound with ~1 eligible warp per scheduler: more
# warps at the same bytes in flight should raise the issue rate. Binaries: .carry/v53w (built on the CPU machine from
# the branch: ninja tools/fp4gemm tests/fp4gemm_gpu_tests, strip --strip-debug).
# The branch also runs the NVFP4 (W4A4) decode in f16 as the general path does (e2m1_quad_f16_raw, one multiply
# per pair by scale * 2^7, f16 mma, partials * 2^7): about 40 fewer instructions per chunk than main's bf16 double
# multiply -- so W16 against A on the nvfp4 cells measures that change (digests may differ: the mma's k slots
# hold other elements), on the bf16 cells nothing (W16 = main's MXFP4 kernels).
# Carry .carry/v53w only (main's CLI is .carry/v53w/fp4gemm_A, main 4af6178: 59 MB with the tree).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v53w/gpu_tests_W; W=.carry/v53w/fp4gemm_W; A=.carry/v53w/fp4gemm_A
# bench/micro/mma_exactness.cu (seconds): bf16 mma.sync on subnormal raw e2m1 inputs; e2m1 through mma.sync e4m3
nvcc -std=c++17 -O2 -arch=sm_90a bench/micro/mma_exactness.cu -o /tmp/mma_exactness > $R/mma_exactness.txt 2>&1 &&
  timeout 60 /tmp/mma_exactness 4096 >> $R/mma_exactness.txt 2>&1; echo "mma_exactness rc=$?" | tee -a $R/rc.txt
F='MoeLayerDecode*:MoeLayerBiases*:MoeLayerGraph*'
for w in 16 20 24; do  # (16: main's warp count with the branch's f16 NVFP4 path)
  FP4GEMM_DECODE_WARPS=$w timeout 100 $T --gtest_filter="$F" > $R/gtest_w$w.log 2>&1; echo "gtest w$w rc=$?" | tee -a $R/rc.txt
  FP4GEMM_DECODE_WARPS=$w timeout 90 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode.EveryTokenCount*' > $R/memcheck_w$w.log 2>&1
  echo "memcheck w$w rc=$?" | tee -a $R/rc.txt
done; snap tests
export FP4GEMM_DIGEST=1
# N9 / N9W24: .carry/v53w/fp4gemm_9op (branch exp/decode-9op-timing built with -DFP4GEMM_TIMING_ONLY_9OP: the
# 9-instruction decode on unpacked bytes -- WRONG RESULTS, digests differ; timing only: 121 instead of 153
# instructions per chunk body) at 16 and 24 warps.
for rnd in 1 2; do for side in A W16 W20 W24 N9 N9W24; do
  bin=$W; [ $side = A ] && bin=$A; case $side in N9*) bin=.carry/v53w/fp4gemm_9op;; esac
  warps=${side#W}; [ $side = N9 ] && warps=16; [ $side = N9W24 ] && warps=24
  for act in bf16 nvfp4; do
    FP4GEMM_DECODE_WARPS=$warps timeout 100 $bin bench --suite layer --act $act --cases 8,9,15,16,22 --settle-ms 100 \
      --json $R/layer_${act}_$side$rnd.json > $R/layer_${act}_$side$rnd.txt 2>&1
  done
  snap "round $rnd $side"
done; done
# Stall reasons of both decode kernels at each warp count (gpt-oss W4A16 T 1, case 15): v53's ncu sections had no
# per-reason breakdown.
for w in 16 20 24; do
  FP4GEMM_DECODE_WARPS=$w timeout 100 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section Occupancy \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active' \
    $W bench --suite layer --act bf16 --cases 15 --iters 3 --warmup 1 --settle-ms 0 > $R/ncu_w$w.txt 2>&1
done; snap ncu

#!/usr/bin/env bash
# v106 call 5 (one GPU, whichever comes; prepared, not yet run): no build on the machine. First `probe/trim.sh out`
# (the carry does not fit beside the whole tree), `probe/trim.sh back` after. Carried, CPU-built (nvcc 13.0, sm_90a):
# .carry/main_cli.tar.xz (main cbab00c's CLI), .carry/fold_cli.tar.xz (exp/wide-fold's CLI) and
# .carry/fold_tests.tar.xz (exp/wide-fold's GPU test binary). 1) the A/B of the two CLIs on the layer suite
# (probe/ab3.sh: W4A16 pieces, checkpoint scales, digests, ROUNDS rounds alternating); 2) the branch's GPU tests on
# what the change touches (the device decodes for every word; MXFP4 pieces: the MoE pieces suites, the layer's decode,
# general and graph paths), in SHARDS parallel shards; 3) compute-sanitizer memcheck of the pieces and decode suites; 4) while the call has time,
# the W4A4 NVFP4 cells with main's CLI (issue 52's shapes, `layer`, pieces, median of 100). v107 added, first,
# bench/micro/pipe_rate.cu (IMAD.WIDE's issue rate).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W; P=$PWD/bench/results/v106/probe
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
# v107: the issue rate of IMAD.WIDE against IMAD (bench/micro/pipe_rate.cu, ~20 s with its build).
nvcc -std=c++17 -O3 -arch=sm_90a bench/micro/pipe_rate.cu -o /tmp/pipe_rate && /tmp/pipe_rate | tee $W/pipe_rate.txt
for v in main fold; do mkdir -p /tmp/x$v && xz -dc .carry/${v}_cli.tar.xz | tar xf - -C /tmp/x$v; done
mkdir -p /tmp/xt && xz -dc .carry/fold_tests.tar.xz | tar xf - -C /tmp/xt
mkdir -p /tmp/ab/m /tmp/ab/f $W/ab; ln -sf /tmp/xmain/tools/fp4gemm /tmp/ab/m/fp4gemm; ln -sf /tmp/xfold/tools/fp4gemm /tmp/ab/f/fp4gemm
ROUNDS=${ROUNDS:-2} bash $P/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m f | tail -20
echo "ab done [$((SECONDS - t0)) s]"
T=/tmp/xt/tests/fp4gemm_gpu_tests; N=${SHARDS:-4}
for i in $(seq 0 $((N - 1))); do
  GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout ${TT:-120} $T --gtest_brief=1 \
    --gtest_filter='*Pieces*:MoeLayer*:DequantDevice*' > $W/tests_$i.txt 2>&1 &
done; wait
for i in $(seq 0 $((N - 1))); do echo "shard $i: $(grep -E '^\[  PASSED  \]|FAILED TEST|tests? ran|^\[  SKIPPED' $W/tests_$i.txt | tr '\n' ' ')"; done
echo "tests done [$((SECONDS - t0)) s]"
timeout ${ST:-90} compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_brief=1 \
  --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:MoeLayerGraph.GeneralPath*' > $W/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $W/memcheck.txt | head -5
if [ $((SECONDS - t0)) -lt ${W4MAX:-330} ]; then
  bash bench/results/v106/probe/w4a4_cells.sh /tmp/xmain/tools/fp4gemm $W
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/c5.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"

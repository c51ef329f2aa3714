#!/usr/bin/env bash
# v106 call 4 (one H200, needs_h200): main built there in /tmp/b (v95's table.sh, PHASE=build: library, CLI, Python
# extension), exp/wide-fold (main + probe/wide_fold.patch) built there in /tmp/bf (library + CLI); the A/B of the two
# CLIs on the layer suite (probe/ab3.sh: W4A16 pieces, checkpoint scales, digests, ROUNDS rounds, alternating); then
# issue 52's table on main (table.sh's rounds: tk_layer_pieces.py, ROUND_REPS); then, while the call has time, the
# W4A4 NVFP4 cells with main's CLI. Carry .carry/peers. (The CLIs built on the CPU machine no longer fit the carry:
# the working tree takes ~57 of its 64 MiB.)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W; P=$PWD/bench/results/v106/probe
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PHASE=build NAME=h4_build_main bash bench/results/v95/probe/table.sh
if [ ! -f /tmp/bf/built ]; then
  rm -rf /tmp/srcf && mkdir /tmp/srcf && tar cf - --exclude=./.carry --exclude=./bench/results . | tar xf - -C /tmp/srcf
  (cd /tmp/srcf && patch -p1 -s < $P/wide_fold.patch) || { echo "patch failed"; exit 3; }
  cmake -S /tmp/srcf -B /tmp/bf -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=OFF > $W/cmake_f.txt 2>&1 || { echo "cmake f failed"; tail -20 $W/cmake_f.txt; }
  ninja -C /tmp/bf > $W/build_f.txt 2>&1; rc=$?; echo "branch build rc $rc [$((SECONDS - t0)) s]"
  [ $rc = 0 ] && touch /tmp/bf/built || tail -30 $W/build_f.txt
fi
mkdir -p /tmp/ab/m /tmp/ab/f $W/ab; ln -sf /tmp/b/tools/fp4gemm /tmp/ab/m/fp4gemm; ln -sf /tmp/bf/tools/fp4gemm /tmp/ab/f/fp4gemm
[ -f /tmp/bf/built ] && ROUNDS=${ROUNDS:-2} bash $P/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m f | tail -20
echo "ab done [$((SECONDS - t0)) s]"
[ $((SECONDS - t0)) -lt ${TMAX:-420} ] && ROUND_REPS=${ROUND_REPS:-100 100} HM=0 SMOKE=0 NAME=h4_table bash bench/results/v95/probe/table.sh
if [ $((SECONDS - t0)) -lt ${W4MAX:-490} ]; then
  bash bench/results/v106/probe/w4a4_cells.sh /tmp/b/tools/fp4gemm $W
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/h4.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"

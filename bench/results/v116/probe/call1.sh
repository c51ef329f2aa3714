#!/usr/bin/env bash
# v116 call 1 (whichever card comes). main as checked out built from scratch there in /tmp/b (library + CLI + tests +
# Python extension, Release, sm_90a; per-unit times from ninja's log: issue 51's build figure on this card), main's CLI
# packed under $OUT (nw_cli.tar.xz). On an H200: issue 52's table (v95's table.sh on /tmp/b: two sustained rounds of 100
# of bench/tk_layer_pieces.py, triton_kernels' layer same run). Then, while the call has time (no table on this card),
# call2.sh's tier phase (8576fa7, the shared search step, was never run on a GPU). Carry .carry/peers (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name $(nproc) cores"
B=/tmp/b; R=$OUT/r1; mkdir -p $R
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=ON > $R/cmake.txt 2>&1 || { echo "cmake failed"; tail -20 $R/cmake.txt; }
  echo "configure [$((SECONDS - t0)) s]"
  ninja -C $B > $R/build.txt 2>&1; rc=$?
  echo "build rc $rc [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch $B/built || tail -30 $R/build.txt
  awk 'NR > 1 {printf "%6.1f s %s\n", ($2 - $1) / 1000, $4}' $B/.ninja_log | sort -rn > $R/units.txt; head -8 $R/units.txt
fi
[ -x $B/tools/fp4gemm ] && tar cf - -C $B tools/fp4gemm | xz -6 -T8 > $OUT/nw_cli.tar.xz
(cd $B/python && ls _fp4gemm*.so && tar cf - _fp4gemm*.so | xz -6 -T8 > $OUT/ext312.tar.xz)  # (for a later call: no build)
if [[ $name == *H200* ]] && [ -z "${NOTABLE:-}" ]; then
  ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 SMOKE=0 MAXB=9999 NAME=t1_table bash bench/results/v95/probe/table.sh
fi
tar czf $OUT/r1.tgz -C $OUT r1 && rm -rf $R
# (with time left -- no table on this card -- main's GPU tier and memcheck: call2.sh's tier phase)
[ $((SECONDS - t0)) -lt 270 ] && BUDGET=$((575 - (SECONDS - t0))) PHASE=tier bash bench/results/v116/probe/call2.sh
echo "call1 done [$((SECONDS - t0)) s]"

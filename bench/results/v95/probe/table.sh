#!/usr/bin/env bash
# v95 (one GPU): issue 52's table on main as checked out, built on the GPU machine itself (no carried binaries):
# CMake (Release, sm_90a) of the library, the CLI and the Python extension in /tmp/b (kept across calls while the
# machine stays warm), then bench/tk_layer_pieces.py (triton_kernels' layer against fp4gemm's on weights in pieces,
# CUDA-graph replay, L2 flushed) for each entry of ROUND_REPS, then Humming 0.1.19 (bench/humming_layer.py, the wheel
# in .carry/peers/wheels) in the same call. Carry .carry/peers (tk_layer.py, triton_kernels, the wheel).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; B=/tmp/b
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=${TESTS:-OFF} -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=ON > $R/cmake.txt 2>&1 || { echo "cmake failed"; tail -20 $R/cmake.txt; }
  ninja -C $B -d stats > $R/build.txt 2>&1; rc=$?
  echo "build rc $rc [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch $B/built || tail -30 $R/build.txt
  # per-unit compile times from the ninja log (ms): the ten slowest
  awk 'NR > 1 {printf "%6.1f s %s\n", ($2 - $1) / 1000, $4}' $B/.ninja_log | sort -rn | head -10 | tee $R/units.txt
fi
[ "${PHASE:-all}" = build ] && { tar czf $OUT/${NAME:-table}.tgz -C $OUT r; exit 0; }  # (PHASE=build: only that)
cp $B/python/_fp4gemm*.so python/fp4gemm/ || { tar czf $OUT/${NAME:-table}.tgz -C $OUT r; exit 3; }
if [ $((SECONDS - t0)) -gt ${MAXB:-330} ]; then  # (too late for the rounds in this call: the next call finds /tmp/b)
  echo "built late: the table in the next call"; tar czf $OUT/${NAME:-table}.tgz -C $OUT r; exit 0; fi
git log --oneline -1 2>/dev/null | tee $R/commit.txt
if [ "${SMOKE:-1}" = 1 ]; then  # (v95 t1: every tk round died of SIGSEGV after the routing line: where?)
  PYTHONPATH=$PWD/python:$PWD/.carry/peers timeout 120 python3 -X faulthandler -c "
import torch, fp4gemm, fp4gemm.moe; print('fp4gemm ok', flush=True)
import fp4gemm.integrations.transformers; print('integration ok', flush=True)
import triton_kernels, triton_kernels.numerics_details.mxfp as m; print('tk ok', flush=True)
w = torch.randn(4, 256, 512, device='cuda', dtype=torch.bfloat16)
q, s = m.downcast_to_mxfp(w.transpose(1, 2), torch.uint8, axis=1); torch.cuda.synchronize(); print('downcast ok', flush=True)
p, s2 = fp4gemm.quantize(w.reshape(-1, 512), 'mxfp4', 'linear'); torch.cuda.synchronize(); print('fp4gemm.quantize ok', flush=True)
" > $R/smoke.txt 2>&1; echo "smoke rc $?"; tail -25 $R/smoke.txt
fi
rnd=0; for reps in ${ROUND_REPS:-100 100 20}; do rnd=$((rnd + 1))
  PYTHONPATH=$PWD/python:$PWD/.carry/peers OUT=$R/tk$rnd TKL_REPS=$reps TKL_SILU=0 TKL_TOKENS=${TOK:-1,8,64,512,4096} \
    TKL_BUDGET_S=${BUDGET:-200} timeout ${TMO:-240} python3 -X faulthandler bench/tk_layer_pieces.py .carry/peers/tk_layer.py > $R/tk$rnd.txt 2>&1
  echo "tk round $rnd ($reps reps) rc=$? [$((SECONDS - t0)) s]"; grep -A 13 "CUDA graph replay" $R/tk$rnd.txt | head -14
done
if [ "${HM:-1}" = 1 ]; then
  python3 -m pip install --no-deps --no-index .carry/peers/wheels/*.whl --target /tmp/hsite > $R/pip.txt 2>&1
  PYTHONPATH=/tmp/hsite:$PWD/python OUT=$R/hm HML_BUDGET_S=${HBUDGET:-150} timeout ${HTMO:-200} \
    python3 bench/humming_layer.py > $R/humming.txt 2>&1
  echo "humming rc=$? [$((SECONDS - t0)) s]"; tail -16 $R/humming.txt
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/${NAME:-table}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v80 (one H200): issue 52's table on main's package (BUNDLE .carry/<tag> holding /tmp/<M>/{cli,gt,py}):
# the layer default-bound gtests, then bench/tk_layer_pieces.py (triton_kernels' layer against fp4gemm on weights in
# pieces, CUDA-graph replay, L2 flushed, 100 reps per cell) ROUNDS times over TOK, then Humming 0.1.19
# (bench/humming_layer.py, the wheel carried in .peers/wheels) in the same call. Carry .carry/<tag> and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-y1}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
if [ -n "${GF:-}" ]; then
  timeout 120 /tmp/$M/gt --gtest_filter="$GF" > $R/gt.txt 2>&1; echo "gt rc $? [$((SECONDS - t0)) s]"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head
fi
cp /tmp/$M/py/_fp4gemm*.so python/fp4gemm/
# ROUND_REPS (added in v81): reps per round, e.g. "100 100 20" (two sustained rounds and a short burst; " ": none);
# by default ROUNDS rounds of 100.
rnd=0; for reps in ${ROUND_REPS:-$(for _ in $(seq 1 ${ROUNDS:-2}); do printf '100 '; done)}; do rnd=$((rnd + 1))
  PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tk$rnd TKL_REPS=$reps TKL_SILU=0 TKL_TOKENS=${TOK:-1,8,64,512,4096} \
    TKL_BUDGET_S=${BUDGET:-200} timeout ${TMO:-240} python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk$rnd.txt 2>&1
  echo "tk round $rnd ($reps reps) rc=$? [$((SECONDS - t0)) s]"; grep -A 13 "CUDA graph replay" $R/tk$rnd.txt | head -14
done
if [ "${HM:-1}" = 1 ]; then
  python3 -m pip install --no-deps --no-index .peers/wheels/*.whl --target .peers/site > $R/pip.txt 2>&1
  PYTHONPATH=$PWD/.peers/site:$PWD/python OUT=$R/hm HML_BUDGET_S=${HBUDGET:-200} timeout ${HTMO:-260} \
    python3 bench/humming_layer.py > $R/humming.txt 2>&1
  echo "humming rc=$? [$((SECONDS - t0)) s]"; tail -16 $R/humming.txt
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/${NAME:-table}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

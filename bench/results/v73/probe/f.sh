#!/usr/bin/env bash
# v73 f (one H200): racecheck of the branch's decode kernels through its CLI (one layer run each: W4A16 MXFP4 and W4A4
# NVFP4 on pieces, T 8 and 1), then issue 52's table (bench/tk_layer_pieces.py around the peers' tk_layer.py, 100 reps,
# graph replay, L2 flushed) on the branch's extension (h/py_new). Carry .carry/c and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/c; mkdir -p $B; H=$(md5sum < .carry/c/b.tar.xz | cut -c1-8)
[ -f $B/done.$H ] || { xz -dc .carry/c/b.tar.xz | tar xf - -C $B; touch $B/done.$H; }
for act in bf16 nvfp4; do for T in 8 1; do
  timeout 60 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 $B/h/cli layer --experts 16 \
    --hidden 352 --inter 160 --tokens $T --topk 4 --act $act --weight-layout pieces --iters 1 --warmup 0 > $R/race_${act}_T$T.txt 2>&1
  echo "racecheck $act T $T rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|decode path|hazard" $R/race_${act}_T$T.txt | head -3
done; done
cp $B/h/py_new/_fp4gemm*.so python/fp4gemm/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tkp TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=${BUDGET:-230} \
  timeout 330 python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk_layer_pieces.txt 2>&1
echo "tk pieces rc=$? [$((SECONDS - t0)) s]"; grep -A 24 "CUDA graph replay" $R/tk_layer_pieces.txt | head -26
gzip -f $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v76 m (one H200): the merge candidate (`m`: fused W4A16 decode kernel + the setup without signed divisions) in one
# bundle with a trace build of it (`t`, decode_layer.cu compiled with -DFP4GEMM_TRACE) and main's kernels (`y`).
# BUNDLE=<tag> (.carry/<tag>/b.tar.xz holding /tmp/<build>/...); M=<candidate> (m), TS="<trace builds>" (t), FUSED="1 0".
#   bash m.sh tests    the decode / pieces / layer-case gtests on the candidate
#   bash m.sh shards   the whole C++ GPU tier on m as 4 gtest shards side by side
#   bash m.sh san      memcheck of the decode gtests (the fused one too), racecheck of the CLI's decode layers
#                      (W4A16 fused, W4A16 two kernels, W4A4), synccheck of the fused one
#   bash m.sh trace    t's per-phase decode trace: gpt-oss W4A16 pieces T 1 / 8, Qwen3 T 1, fused and two kernels
#   bash m.sh py       the whole Python suite on m's extension
#   bash m.sh tk       issue 52's decode cells against triton_kernels (bench/tk_layer_pieces.py; carry .peers)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-m}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 FP4GEMM_CLI=/tmp/$M/cli
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
for mode in "$@"; do
if [ "$mode" = tests ]; then
  timeout 200 /tmp/$M/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:MoeLayerCases.*' > $R/gt.txt 2>&1
  echo "gt $M rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt
fi
if [ "$mode" = shards ]; then
  for i in 0 1 2 3; do
    (GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout ${SHT:-330} /tmp/$M/gt > $R/shard$i.txt 2>&1; echo "shard $i rc $? [$((SECONDS - t0)) s]") &
  done; wait
  for i in 0 1 2 3; do echo "-- shard $i"; gsum $R/shard$i.txt; grep -E "^\[ RUN" $R/shard$i.txt | tail -1; done
fi
if [ "$mode" = san ]; then
  timeout 240 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/$M/gt \
    --gtest_filter='MoeLayerDecode.*' > $R/memcheck.txt 2>&1
  echo "memcheck decode gtests rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
  for v in bf16:1 bf16:0 nvfp4:1; do act=${v%%:*}; fu=${v##*:}
    FP4GEMM_DECODE_FUSED=$fu timeout 90 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 /tmp/$M/cli layer \
      --experts 16 --hidden 2080 --inter 800 --tokens 8 --topk 2 --act $act --weight-layout pieces --decode-tokens 8 \
      --iters 1 --warmup 0 > $R/race_${act}_$fu.txt 2>&1
    echo "racecheck $act fused=$fu rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|decode path|hazard" $R/race_${act}_$fu.txt | head -3
  done
  timeout 90 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 9 /tmp/$M/cli layer \
    --experts 16 --hidden 2080 --inter 800 --tokens 8 --topk 2 --act bf16 --weight-layout pieces --decode-tokens 8 \
    --iters 1 --warmup 0 > $R/sync_bf16.txt 2>&1
  echo "synccheck bf16 rc $? [$((SECONDS - t0)) s]"; grep -E "SYNCCHECK SUMMARY|ERROR SUMMARY" $R/sync_bf16.txt | head -2
fi
if [ "$mode" = trace ]; then
  for tb in ${TS:-t}; do
  for c in "128 2880 2880 4 swigluoai 1" "128 2880 2880 4 swigluoai 8" "128 2048 768 8 silu 1"; do set -- $c
    for fu in ${FUSED:-1 0}; do
      FP4GEMM_DECODE_FUSED=$fu timeout 60 /tmp/$tb/cli layer --experts $1 --hidden $2 --inter $3 --topk $4 --activation $5 \
        --tokens $6 --act bf16 --weight-layout pieces --iters 20 --warmup 5 > $R/trace_${tb}_H$2_T$6_f$fu.txt 2>&1 || echo "trace $tb $c $fu FAILED"
    done
  done; done; echo "trace [$((SECONDS - t0)) s]"
  for f in $R/trace_*; do echo "== $(basename $f)"; grep -E "^time|  kernel" $f | grep -vE "entry|cta share|cursor"; done
fi
if [ "$mode" = py ]; then
  cp /tmp/$M/py/_fp4gemm*.so python/fp4gemm/
  (cd tests/python && PYTHONPATH=../../python timeout ${PYT:-400} python3 -m pytest -q -rs . > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
  tail -40 $R/py.txt | grep -vE "^\.+"
fi
if [ "$mode" = tk ]; then
  cp /tmp/$M/py/_fp4gemm*.so python/fp4gemm/
  PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tkp TKL_REPS=100 TKL_SILU=0 TKL_TOKENS=${TOK:-1,8} TKL_BUDGET_S=${BUDGET:-100} \
    timeout ${TMO:-170} python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk_layer_pieces.txt 2>&1
  echo "tk pieces rc=$? [$((SECONDS - t0)) s]"; grep -A 12 "CUDA graph replay" $R/tk_layer_pieces.txt | head -14
fi
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-r}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v73 e (one H200): exp/decode-ring's final build (h: gt, cli, py_new) against main (m: cli), bundle .carry/c.
#   bash e.sh gt        the layer gtests (every MoeLayer* suite, EpExchangeGpu, CliGpu, RunSafety*) and memcheck of the
#                       decode path's tests (MoeLayerPieces, MoeLayerDecode.Every*, MoeLayerGraph.Decode*)
#   bash e.sh rest      racecheck of MoeLayerDecode.Every*, both layer suites on pieces (28 cells) h against m, 2 rounds,
#                       digests; the Python layer tests (test_moe_layer_gpu.py, test_pieces.py) on h's extension
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/c; mkdir -p $B; H=$(md5sum < .carry/c/b.tar.xz | cut -c1-8)
[ -f $B/done.$H ] || { xz -dc .carry/c/b.tar.xz | tar xf - -C $B; touch $B/done.$H; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
export FP4GEMM_CLI=$B/h/cli
if [ "${1:-}" = gt ]; then
  timeout 330 $B/h/gt --gtest_filter='*MoeLayer*:EpExchangeGpu*:CliGpu*:*RunSafety*' > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt; grep -E "^\[ RUN" $R/gt.txt | tail -1
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/h/gt \
    --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.Every*:MoeLayerGraph.Decode*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
if [ "${1:-}" = rest ]; then
  timeout 150 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 $B/h/gt \
    --gtest_filter='MoeLayerDecode.Every*' > $R/racecheck.txt 2>&1
  echo "racecheck rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|hazard" $R/racecheck.txt | head -4
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in bf16 nvfp4; do for v in h m; do
    timeout 100 $B/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
    echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
  done; done; done
  python3 bench/results/v73/probe/ratios.py $R h m
  for act in bf16 nvfp4; do for v in h m; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
    cmp -s $R/dig_${act}_h.txt $R/dig_${act}_m.txt && echo "$act digests equal ($(wc -l < $R/dig_${act}_h.txt))" || echo "$act digests DIFFER"; done
  cp $B/h/py_new/_fp4gemm*.so python/fp4gemm/
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  (cd tests/python && PYTHONPATH=../../python timeout ${PYT:-200} python3 -m pytest -q -rs -x test_moe_layer_gpu.py test_pieces.py > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
  tail -6 $R/py.txt
fi
gzip -f $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

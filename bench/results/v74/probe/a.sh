#!/usr/bin/env bash
# v74 (session 87), one H200. Bundle .carry/<tag>/b.tar.xz (gt, cli, py/_fp4gemm*.so), unpacked once per warm machine.
#   TAG=n bash a.sh first      MoeLayerDecode.LongShares* (new in 8c12c5e), its memcheck, CLI racecheck with refills
#   TAG=n bash a.sh shards     the whole C++ GPU tier as 4 gtest shards run side by side on the one GPU
#   TAG=n bash a.sh py         the whole Python suite (host + GPU tier) on the bundle's extension
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; TAG=${TAG:-n}
B=/tmp/$TAG; mkdir -p $B; H=$(md5sum < .carry/$TAG/b.tar.xz | cut -c1-8)
[ -f $B/done.$H ] || { xz -dc .carry/$TAG/b.tar.xz | tar xf - -C /tmp; touch $B/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
export FP4GEMM_CLI=$B/cli
for mode in "$@"; do
if [ "$mode" = first ]; then
  timeout 120 $B/gt --gtest_filter='MoeLayerDecode.LongShares*' > $R/long.txt 2>&1
  echo "LongShares rc $? [$((SECONDS - t0)) s]"; gsum $R/long.txt
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/gt \
    --gtest_filter='MoeLayerDecode.LongShares*' > $R/long_memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/long_memcheck.txt | head -3
  for act in nvfp4 bf16; do
    timeout 90 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 $B/cli layer --experts 16 \
      --hidden 2080 --inter 800 --tokens 8 --topk 2 --act $act --weight-layout pieces --decode-tokens 8 --iters 1 --warmup 0 > $R/race_$act.txt 2>&1
    echo "racecheck $act rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|decode|hazard" $R/race_$act.txt | head -3
  done
fi
if [ "$mode" = shards ]; then
  for i in 0 1 2 3; do
    (GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout ${SHT:-420} $B/gt > $R/shard$i.txt 2>&1; echo "shard $i rc $? [$((SECONDS - t0)) s]") &
  done; wait
  for i in 0 1 2 3; do echo "-- shard $i"; gsum $R/shard$i.txt; grep -E "^\[ RUN" $R/shard$i.txt | tail -1; done
fi
if [ "$mode" = py ]; then
  cp $B/py/_fp4gemm*.so python/fp4gemm/
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  (cd tests/python && PYTHONPATH=../../python timeout ${PYT:-400} python3 -m pytest -q -rs . > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
  tail -40 $R/py.txt | grep -vE "^\.+"
fi
done
gzip -f $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

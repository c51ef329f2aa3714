#!/usr/bin/env bash
# Prepared for the next session (not run): the whole GPU tier on main's kernels after v72 (three merges in the MoE
# kernel's 16-token loop, and the decode path's range-check fix with its new GPU case MoeLayerPieces v 6). The bundle
# .carry/v118n (gt, cli, py_new; xz with a 192 MiB dictionary) was built from main 0bca7b0's sources (later commits:
# docs only). v72 ran only the MoE / pieces / GLU / layer gtests of the merged loop, and nothing of the fix on a GPU.
#   bash next_tier.sh fix     bash next_tier.sh 0 1     bash next_tier.sh 2 3 memcheck     bash next_tier.sh py
# (carry .carry/v118n; four gtest shards, two per call, ~265 s each; then the Python GPU tier on py_new)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/v118; mkdir -p $B; [ -f $B/v118n.done ] || { xz -dc .carry/v118n/b.tar.xz | tar xf - -C $B; touch $B/v118n.done; }
export FP4GEMM_CLI=$B/cli  # (the CliGpu tests run the carried CLI; without it they skip)
if [[ " $* " == *" fix "* ]]; then  # the fix's GPU case and the decode tests, memcheck of the first
  timeout 200 $B/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*' > $R/fix.txt 2>&1
  echo "fix tests rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/fix.txt | head -8
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/gt \
    --gtest_filter='MoeLayerPieces.*' > $R/fix_memcheck.txt 2>&1
  echo "fix memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/fix_memcheck.txt | head -3
fi
for s in "$@"; do
  case $s in memcheck|py|fix) continue;; esac
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 265 $B/gt > $R/shard$s.txt 2>&1
  echo "shard $s rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/shard$s.txt | head -12
  grep -E "^\[ RUN" $R/shard$s.txt | tail -1
done
if [[ " $* " == *" memcheck "* ]]; then
  timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/gt \
    --gtest_filter='*MoeSanitizer*:*BadRouting*:*FusedSanitizer*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
fi
if [[ " $* " == *" py "* ]]; then
  cp $B/py_new/_fp4gemm*.so python/fp4gemm/
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  (cd tests/python && PYTHONPATH=../../python timeout ${PYT:-420} python3 -m pytest -q -rs ${PYSEL:-test_moe_layer_gpu.py test_pieces.py test_transformers_gpu.py test_lifetimes_gpu.py test_moe_gpu.py test_gpu.py} > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
  tail -8 $R/py.txt
fi
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# One batched run on a GPU machine of binaries built elsewhere and carried over (the device tool's
# `carry`): the C++ GPU tier in shards, compute-sanitizer on the layer / MoE / ordering tests, the
# Python tiers, the long randomized call sequences and the host overhead per call. Logs go to $OUT.
#
# Layout expected under the repository root (scripts/carry_build.sh makes it):
#   .carry/build/tests/fp4gemm_gpu_tests, .carry/build/tools/fp4gemm   (C++; the CLI path baked into
#        the tests is the build folder's, so it is linked there: FP4GEMM_BUILD_DIR)
#   .carry/pkg/fp4gemm/                                               (the Python package + extension)
#
# Usage: scripts/device_carried.sh [gpu|sanitize|python|random|overhead]...  (default: all, in order)
# Environment: FP4GEMM_BUILD_DIR (the build folder the binaries were built in), SHARDS (3),
# RANDOM_LONG (10000 sequences), RANDOM_PROCS (8 processes), PYTEST_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg${PYTHONPATH:+:$PYTHONPATH}"
B=${FP4GEMM_BUILD_DIR:-}
if [ -n "$B" ] && [ ! -e "$B" ]; then mkdir -p "$(dirname "$B")" && ln -s "$PWD/.carry/build" "$B"; fi
BIN=.carry/build
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(gpu sanitize python random overhead)
declare -A rc=()
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
for step in "${steps[@]}"; do
  t0=$SECONDS
  case "$step" in
    gpu)
      n=${SHARDS:-3}; pids=()
      for ((i = 0; i < n; i++)); do
        GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout 900 "$BIN/tests/fp4gemm_gpu_tests" --gtest_brief=1 \
          > "$OUT/gpu_shard$i.log" 2>&1 & pids+=($!)
      done
      rc[gpu]=0
      for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc[gpu]=$?; done
      for ((i = 0; i < n; i++)); do
        echo "-- shard $i"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED TEST|tests ran" "$OUT/gpu_shard$i.log" | head -12
      done ;;
    sanitize)
      # (+ two GLU MoE shape tests that reach the small token classes' stream-K pieces, ~6 s under memcheck on an
      # H100: without them the filter missed a fault there that the GPU tier found, docs/PERF.md v110)
      filter=${SAN_FILTER:-*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles}
      timeout 480 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/tests/fp4gemm_gpu_tests" --gtest_filter="$filter" \
        > "$OUT/sanitizer_memcheck.log" 2>&1
      rc[sanitize]=$?
      grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" "$OUT/sanitizer_memcheck.log" | head -6
      # the Python layer path under memcheck too (the lifetimes tests: GPU-quantised weights, reloads)
      timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/python/test_lifetimes_gpu.py -q -x \
        -p no:cacheprovider -k "not describe" > "$OUT/sanitizer_python.log" 2>&1
      r=$?; [ $r -ne 0 ] && rc[sanitize]=$r
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer_python.log" | tail -3 ;;
    python)
      timeout 900 python3 -m pytest tests/python -q -rs -p no:cacheprovider ${PYTEST_ARGS:-} > "$OUT/py_tests.log" 2>&1
      rc[python]=$?
      grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/py_tests.log" | tail -15 ;;
    random)
      # RANDOM_PROCS processes, each running batches of RANDOM_BATCH sequences (a new seed per batch)
      # until RANDOM_LONG sequences in all or RANDOM_SECONDS have passed; every batch prints its counts.
      total=${RANDOM_LONG:-10000}; procs=${RANDOM_PROCS:-8}; batch=${RANDOM_BATCH:-100}; budget=${RANDOM_SECONDS:-480}
      per=$(( (total + procs - 1) / procs )); pids=(); start=$SECONDS
      for ((i = 0; i < procs; i++)); do
        (
          done_=0; b=0
          while [ $done_ -lt $per ] && [ $((SECONDS - start)) -lt "$budget" ]; do
            FP4GEMM_RANDOM_LONG=$batch FP4GEMM_RANDOM_SEED=$((100000 * (i + 1) + b + ${RANDOM_SEED0:-0})) timeout 600 python3 -m pytest \
              tests/python/test_random_sequences.py -q -rN -p no:cacheprovider -k "gpu_random" > "$OUT/random_${i}_$b.log" 2>&1 ||
              echo "FAILED batch $i/$b" >> "$OUT/random_failures.txt"
            done_=$((done_ + batch)); b=$((b + 1))
          done
        ) & pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done
      rc[random]=0; [ -s "$OUT/random_failures.txt" ] && rc[random]=1
      cat "$OUT"/random_*_*.log > "$OUT/random_all.log"; rm -f "$OUT"/random_*_*.log
      echo "batches: $(grep -c 'passed' "$OUT/random_all.log") passed, $(grep -cE '[0-9]+ failed' "$OUT/random_all.log") failed"
      grep -oE "random sequences \(gpu\): [0-9]+ sequences, [0-9]+ library calls, [0-9]+ results checked" "$OUT/random_all.log" |
        awk '{s += $4; c += $6; r += $9} END {print "GPU random sequences:", s, "sequences,", c, "library calls,", r, "results checked"}'
      cat "$OUT/random_failures.txt" 2>/dev/null | head ;;
    overhead)
      timeout 300 python3 bench/host_overhead.py > "$OUT/host_overhead.txt" 2>&1
      rc[overhead]=$?
      tail -25 "$OUT/host_overhead.txt" ;;
    *) echo "unknown step $step"; rc[$step]=2 ;;
  esac
  echo "[device] $step: rc=${rc[$step]:-?}, $((SECONDS - t0)) s"
done
summary=""; status=0
for s in "${steps[@]}"; do summary+=" $s=${rc[$s]:-?}"; [ "${rc[$s]:-1}" != 0 ] && status=1; done
echo "[device] summary:$summary" | tee "$OUT/summary.txt"
exit $status

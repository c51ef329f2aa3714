#!/usr/bin/env bash
# The Python package on a GPU machine, offline: install from the repository root, both pytest tiers,
# the host overhead per call, and `python -m fp4gemm.bench`. Logs and JSON go to $OUT (default ./out).
#
# Usage: scripts/python_gpu_check.sh [install|test|overhead|bench]...   (default: all four, in order)
#
# Expects torch, numpy, pytest, ml_dtypes, nanobind, scikit-build-core, CMake >= 3.28 and nvcc to be
# installed already: there is no network, so pip runs with --no-build-isolation --no-deps --no-index.
# The build tree is kept in build-py/<wheel tag>/, so a second `install` only recompiles what changed;
# when the first build (the two fused kernels dominate) does not fit one call, run `install` alone
# first, then `test overhead bench`.
# Environment: OUT, PYTHON (python3), CMAKE_BUILD_PARALLEL_LEVEL (16), PY_BENCH_ARGS (extra bench
# arguments, e.g. "--fresh-data"), PYTEST_ARGS (extra pytest arguments, e.g. "-k readme").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi

steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(install test overhead bench)
declare -A rc=()
say() { echo "[py-gpu] $*"; }

{
  echo "date: $(date -u +%FT%TZ)"; echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed paths"
  nvidia-smi -L 2>&1 | head -8
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"; echo "cmake: $(cmake --version 2>&1 | head -1)"
  "$PY" - <<'PY' 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for m in ("torch", "numpy", "pytest", "ml_dtypes", "nanobind", "scikit_build_core"):
    try:
        mod = importlib.import_module(m)
        print(f"{m} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        print(f"{m} MISSING ({type(e).__name__}: {e})")
PY
} > "$OUT/py_env.txt" 2>&1
cat "$OUT/py_env.txt"

for step in "${steps[@]}"; do
  t0=$SECONDS
  case "$step" in
    install)
      say "pip install --no-build-isolation --no-deps --no-index . (CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL; log: $OUT/py_install.log)"
      "$PY" -m pip install --no-build-isolation --no-deps --no-index -v . > "$OUT/py_install.log" 2>&1
      rc[install]=$?
      if [ "${rc[install]}" -ne 0 ]; then
        grep -E "error|Error|ERROR" "$OUT/py_install.log" | head -30; tail -15 "$OUT/py_install.log"
        say "install FAILED (rc=${rc[install]}); stopping"; break
      fi
      (cd /tmp && "$PY" -c "
import fp4gemm, torch
print('installed', fp4gemm.__file__)
print('device_info', fp4gemm.device_info())
print('torch.ops.fp4gemm.grouped_gemm registered:', hasattr(torch.ops.fp4gemm, 'grouped_gemm'))
") 2>&1 | tee "$OUT/py_import.txt" ;;
    test)
      say "pytest tests/python -q -rs (log: $OUT/py_pytest.log)"
      timeout 420 "$PY" -m pytest tests/python -q -rs -p no:cacheprovider --junitxml="$OUT/py_pytest.xml" \
        ${PYTEST_ARGS:-} > "$OUT/py_pytest.log" 2>&1
      rc[test]=$?
      grep -A8 "host overhead per call" "$OUT/py_pytest.log" | head -9
      tail -30 "$OUT/py_pytest.log" ;;
    overhead)
      say "python -m fp4gemm.bench --overhead-only (log: $OUT/py_overhead.txt)"
      timeout 120 "$PY" -m fp4gemm.bench --overhead-only --json "$OUT/py_overhead.json" > "$OUT/py_overhead.txt" 2>&1
      rc[overhead]=$?
      cat "$OUT/py_overhead.txt" ;;
    bench)
      say "python -m fp4gemm.bench --json $OUT/py_bench.json ${PY_BENCH_ARGS:-} (log: $OUT/py_bench.txt)"
      timeout 360 "$PY" -m fp4gemm.bench --json "$OUT/py_bench.json" ${PY_BENCH_ARGS:-} > "$OUT/py_bench.txt" 2> "$OUT/py_bench.err"
      rc[bench]=$?
      cat "$OUT/py_bench.txt"; tail -5 "$OUT/py_bench.err" ;;
    *)
      say "unknown step '$step' (install|test|overhead|bench)"; rc[$step]=2 ;;
  esac
  say "$step: rc=${rc[$step]:-?}, $((SECONDS - t0)) s"
done

status=0
summary=""
for s in "${steps[@]}"; do
  [ -n "${rc[$s]+x}" ] || continue
  summary+=" $s=${rc[$s]}"; [ "${rc[$s]}" -ne 0 ] && status=1
done
say "summary:$summary (logs in $OUT)" | tee "$OUT/py_summary.txt"
exit $status

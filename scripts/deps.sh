#!/usr/bin/env bash
# Installs what fp4gemm needs on a fresh Debian/Ubuntu machine that has the CUDA toolkit (>= 12.8;
# 13 recommended): Debian packages with apt-get, Python packages with pip. Says clearly what is
# missing otherwise. Idempotent; sourced by build-and-test.sh and bench.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/progress.sh"
mkdir -p build
echo "[deps] Python: $(command -v python3 || echo none) -- Python packages are installed into this interpreter's"
echo "[deps] environment (a virtual environment works: activate it first). A pip-installed cmake may come"
echo "[deps] first on PATH: $(command -v cmake || echo 'no cmake yet')"

need_apt=()
have_header() { [ -e "/usr/include/$1" ] || [ -e "/usr/local/include/$1" ]; }
have_header gtest/gtest.h || need_apt+=(libgtest-dev libgmock-dev)
have_header CLI/CLI.hpp || need_apt+=(libcli11-dev)
have_header nlohmann/json.hpp || need_apt+=(nlohmann-json3-dev)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[deps] installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  with_progress "apt-get update" build/deps-apt.log $SUDO apt-get update -q &&
    with_progress "apt-get install" build/deps-apt-install.log $SUDO apt-get install -y -q "${need_apt[@]}" || {
    echo "[deps] ERROR: could not install ${need_apt[*]} with apt-get; install them and retry" >&2; exit 1; }
fi

# CMake >= 3.28 (CUDA C++20); pip's cmake if the system one is older.
cmake_ok() { command -v cmake >/dev/null && python3 - "$(cmake --version | head -1 | awk '{print $3}')" <<'PY'
import sys; v=tuple(int(x) for x in sys.argv[1].split('.')[:2]); sys.exit(0 if v >= (3, 28) else 1)
PY
}
if ! cmake_ok; then
  echo "[deps] installing cmake >= 3.28 with pip"
  with_progress "pip install cmake" build/deps-pip-cmake.log python3 -m pip install "cmake>=3.28" ||
    { echo "[deps] ERROR: need CMake >= 3.28" >&2; exit 1; }
  hash -r
  echo "[deps] now using $(command -v cmake) ($(cmake --version | head -1))"
fi

py_missing=()
for mod in numpy pytest hypothesis ml_dtypes nanobind scikit_build_core; do
  python3 -c "import $mod" 2>/dev/null || py_missing+=("$mod")
done
if [ ${#py_missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${py_missing[@]}" | sed 's/scikit_build_core/scikit-build-core/; s/ml_dtypes/ml_dtypes/')
  echo "[deps] installing Python packages: $(echo $pkgs)"
  with_progress "pip install" build/deps-pip.log python3 -m pip install $pkgs ||
    { echo "[deps] ERROR: pip could not install: $(echo $pkgs)" >&2; exit 1; }
fi

# Optional: safetensors, for the checkpoint-file tests (tests/python/test_checkpoints.py; without it
# they skip, saying so).
if ! python3 -c "import safetensors" 2>/dev/null; then
  echo "[deps] installing safetensors (optional: the checkpoint-file tests)"
  with_progress "pip install safetensors" build/deps-pip-safetensors.log python3 -m pip install safetensors ||
    echo "[deps] note: pip could not install safetensors; the checkpoint-file tests will be skipped" >&2
fi

if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
command -v nvcc >/dev/null || { echo "[deps] ERROR: nvcc not found: install the CUDA toolkit 13 (https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH" >&2; exit 1; }

# A CUDA tool the host tier's SASS checks run, where the toolkit install left it out: the toolkit's
# (on PATH or beside nvcc), else NVIDIA's PyPI wheel nvidia-cuda-<tool> (the checks look there too).
#   cuobjdump: the stack-frame check (scripts/check_kernel_stack.py, -res-usage);
#   nvdisasm:  run by `cuobjdump -sass` for the k-loop check (scripts/sass_local_memory.py).
need_cuda_tool() {
  local tool=$1 purpose=$2
  command -v "$tool" >/dev/null && return 0
  [ -x "$(dirname "$(command -v nvcc)")/$tool" ] && return 0
  python3 -c "import glob, importlib.util as u, sys; s = u.find_spec('nvidia'); sys.exit(0 if s and any(glob.glob(p + '/cu*/bin/$tool') for p in s.submodule_search_locations) else 1)" 2>/dev/null && return 0
  local cuda_major
  cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  echo "[deps] installing $tool for CUDA ${cuda_major} with pip (nvidia-cuda-$tool; $purpose uses it)"
  with_progress "pip install nvidia-cuda-$tool" "build/deps-pip-$tool.log" \
    python3 -m pip install "nvidia-cuda-$tool>=${cuda_major},<$((cuda_major + 1))" ||
    { echo "[deps] ERROR: no $tool: install the CUDA toolkit's $tool or nvidia-cuda-$tool" >&2; exit 1; }
}
need_cuda_tool cuobjdump "the stack-frame check"
need_cuda_tool nvdisasm "the k-loop check"

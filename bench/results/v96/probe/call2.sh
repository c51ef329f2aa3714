#!/usr/bin/env bash
# v96 call 2 (one GPU): the describe() fix (python/exports.map: the module exports PyInit__fp4gemm alone) on the GPU
# machine's toolchain. Builds main in /tmp/b directly (CMake, FP4GEMM_BUILD_PYTHON=ON), installs the prebuilt way into
# /tmp/pp, then against both: test_packaging.py, describe_repro.py (rows / pieces) and test_lifetimes_gpu.py.
# PHASE=tier: the whole Python tier (host + GPU) against /tmp/pp instead (call 3; the build is kept while warm).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/c2; mkdir -p $R; B=/tmp/b; P=bench/results/v96/probe; P95=bench/results/v95/probe
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt; git log --oneline -1 | tee $R/commit.txt
if [ ! -f $B/built ]; then
  (/opt/gcc/bin/g++ -v 2>&1 || g++ -v 2>&1) | tail -3 > $R/gxx.txt
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=ON > $R/cmake.txt 2>&1 || { echo "cmake failed"; tail -20 $R/cmake.txt; }
  ninja -C $B > $R/build.txt 2>&1; rc=$?
  echo "build rc $rc [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch $B/built || tail -30 $R/build.txt
  timeout 300 python3 -m pip install --no-build-isolation --no-deps . -C "cmake.define.FP4GEMM_PREBUILT_DIR=$B" \
    -C "build-dir=/tmp/bp" --target /tmp/pp > $R/pip.txt 2>&1; echo "pip (prebuilt) rc $? [$((SECONDS - t0)) s]"
fi
so=$(ls $B/python/_fp4gemm*.so | head -1)
for f in $so /tmp/pp/fp4gemm/_fp4gemm*.so; do echo "$f: $(nm -D --defined-only $f | wc -l) exported, NEEDED $(readelf -d $f | grep -o 'NEEDED.*' | tr '\n' ' ')"; done | tee $R/exports.txt
if [ "${PHASE:-checks}" = tier ]; then
  rm -f python/fp4gemm/_fp4gemm*.so
  (cd tests/python && PYTHONPATH=/tmp/pp timeout ${TIER_S:-480} python3 -m pytest -q -rs -p no:cacheprovider . > $R/tier.txt 2>&1; \
    echo "Python tier (host + GPU, prebuilt) rc $? $(tail -1 $R/tier.txt) [$((SECONDS - t0)) s]")
  grep -E "^(FAILED|ERROR)" $R/tier.txt | head -20
else
  for how in direct prebuilt; do
    if [ $how = direct ]; then cp $so python/fp4gemm/; PP=$PWD/python; else rm -f python/fp4gemm/_fp4gemm*.so; PP=/tmp/pp; fi
    for args in "rows 8 2880 2880 4 4096" "pieces 8 2880 2880 4 64"; do
      PYTHONPATH=$PP timeout 90 python3 $P95/describe_repro.py $args > $R/rep_${how}_${args%% *}.txt 2>&1
      echo "$how ${args%% *}: describe rc $? $(grep -c 'describe ok' $R/rep_${how}_${args%% *}.txt) ok"
    done
    (cd tests/python && PYTHONPATH=$PP timeout 200 python3 -m pytest -q -rs -p no:cacheprovider test_packaging.py test_lifetimes_gpu.py > $R/life_$how.txt 2>&1; \
      echo "$how: packaging + lifetimes rc $? $(tail -1 $R/life_$how.txt) [$((SECONDS - t0)) s]")
  done
  head -4 $R/rep_prebuilt_pieces.txt
fi
tar czf $OUT/c2${PHASE:-}.tgz -C $OUT c2 && rm -rf $R; echo "call2 ${PHASE:-checks} done [$((SECONDS - t0)) s]"

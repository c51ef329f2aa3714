#!/usr/bin/env bash
# v96 call 1 (one GPU): MoeLayer.describe()'s segfault (v95) located. Builds main in /tmp/b the direct way (CMake,
# FP4GEMM_BUILD_PYTHON=ON beside the library; host C++ with -g, codegen unchanged), relinks the extension without
# nanobind's -Wl,-s (same objects, symbols kept), installs the prebuilt way (pip, FP4GEMM_PREBUILT_DIR=/tmp/b) into
# /tmp/pp, then runs describe_repro.py (v95) under the LD_PRELOAD'ed segv_bt.so against the three, and the Python
# lifetimes test against the direct and prebuilt ones. Both compile_commands.json and the .so files come back.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/c1; mkdir -p $R; B=/tmp/b; P=bench/results/v96/probe; P95=bench/results/v95/probe
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
gcc -shared -fPIC -O1 -o /tmp/segv_bt.so $P/segv_bt.c -ldl || echo "segv_bt build failed"
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=${TESTS:-OFF} -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=ON -DCMAKE_CXX_FLAGS=-g -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > $R/cmake.txt 2>&1 || { echo "cmake failed"; tail -20 $R/cmake.txt; }
  ninja -C $B > $R/build.txt 2>&1; rc=$?
  echo "build rc $rc [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch $B/built || tail -30 $R/build.txt
fi
cp $B/compile_commands.json $R/cc_direct.json
so=$(cd $B && ls python/_fp4gemm*.so | head -1); echo "extension $so"
mkdir -p $B/nostrip
(cd $B && ninja -t commands $so | tail -1 | sed -e 's/ -Wl,-s / /' -e "s# -o $so # -o nostrip/$(basename $so) #" > $R/relink.sh && bash $R/relink.sh) \
  && echo "relinked without -s" || echo "relink failed"
rm -f python/fp4gemm/_fp4gemm*.so
timeout 300 python3 -m pip install --no-build-isolation --no-deps . -C "cmake.define.FP4GEMM_PREBUILT_DIR=$B" \
  -C "build-dir=/tmp/bp" -C "cmake.define.CMAKE_EXPORT_COMPILE_COMMANDS=ON" --target /tmp/pp > $R/pip.txt 2>&1
echo "pip (prebuilt) rc $? [$((SECONDS - t0)) s]"; cp /tmp/bp/compile_commands.json $R/cc_prebuilt.json 2>/dev/null
python3 -c "import nanobind, sys, torch; print('nanobind', nanobind.__version__, 'python', sys.version.split()[0], 'torch', torch.__version__)" | tee $R/versions.txt
run_repro() {  # $1 name, $2 PYTHONPATH
  for args in "rows 8 2880 2880 4 4096" "pieces 8 2880 2880 4 64"; do
    tag=$1_${args%% *}
    PYTHONPATH=$2 LD_PRELOAD=/tmp/segv_bt.so timeout 90 python3 $P95/describe_repro.py $args > $R/rep_$tag.txt 2>&1
    echo "$tag: rc $? $(grep -cE 'describe ok' $R/rep_$tag.txt) ok [$((SECONDS - t0)) s]"
  done
}
cp $B/$so python/fp4gemm/; run_repro direct $PWD/python
(cd tests/python && PYTHONPATH=$PWD/../../python LD_PRELOAD=/tmp/segv_bt.so timeout 200 python3 -m pytest -q -rs -x test_lifetimes_gpu.py > $R/life_direct.txt 2>&1; echo "direct lifetimes rc $? $(tail -1 $R/life_direct.txt)")
cp $B/nostrip/*.so python/fp4gemm/; run_repro nostrip $PWD/python
rm -f python/fp4gemm/_fp4gemm*.so; run_repro prebuilt /tmp/pp
(cd tests/python && PYTHONPATH=/tmp/pp LD_PRELOAD=/tmp/segv_bt.so timeout 200 python3 -m pytest -q -rs -x test_lifetimes_gpu.py > $R/life_prebuilt.txt 2>&1; echo "prebuilt lifetimes rc $? $(tail -1 $R/life_prebuilt.txt)")
gzip -c $B/nostrip/*.so > $OUT/direct_nostrip.so.gz; gzip -c /tmp/pp/fp4gemm/_fp4gemm*.so > $OUT/prebuilt.so.gz
grep -h "segv_bt\|^#" $R/rep_*.txt | head -60
tar czf $OUT/c1.tgz -C $OUT c1 && rm -rf $R; ls -la $OUT; echo "call1 done [$((SECONDS - t0)) s]"

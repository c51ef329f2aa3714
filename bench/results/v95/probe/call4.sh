#!/usr/bin/env bash
# Prepared for the next session (not run): MoeLayer.describe()'s segfault, the two builds side by side on one GPU
# machine. (1) direct: CMake with FP4GEMM_BUILD_PYTHON=ON beside the library (/tmp/b, table.sh PHASE=build; the
# plain `pip install .` builds this way too); (2) prebuilt: pip with FP4GEMM_PREBUILT_DIR=/tmp/b (the README's test
# command's way), installed into /tmp/pp. describe_repro.py against each, then the Python GPU lifetimes test
# (which calls describe() in a subprocess) against each.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; P=bench/results/v95/probe; R=$OUT/c4; mkdir -p $R
TESTS=OFF PHASE=build NAME=c4_build bash $P/table.sh
rm -f python/fp4gemm/_fp4gemm*.so
timeout 300 python3 -m pip install --no-build-isolation --no-deps . -C "cmake.define.FP4GEMM_PREBUILT_DIR=/tmp/b" \
  -C "build-dir=/tmp/bp" --target /tmp/pp > $R/pip.txt 2>&1; echo "pip (prebuilt) rc $? [$((SECONDS - t0)) s]"
python3 -c "import nanobind; print('nanobind', nanobind.__version__)" | tee $R/nb.txt
for how in direct prebuilt; do
  if [ $how = direct ]; then cp /tmp/b/python/_fp4gemm*.so python/fp4gemm/; PP=$PWD/python
  else rm -f python/fp4gemm/_fp4gemm*.so; PP=/tmp/pp; fi
  PYTHONPATH=$PP timeout 60 python3 -X faulthandler $P/describe_repro.py rows 8 2880 2880 4 4096 > $R/rep_$how.txt 2>&1
  echo "$how: describe rc $? $(grep -E 'describe ok|Segmentation' $R/rep_$how.txt | head -1) [$((SECONDS - t0)) s]"
  (cd tests/python && PYTHONPATH=$PP timeout 200 python3 -m pytest -q -rs test_lifetimes_gpu.py > $R/life_$how.txt 2>&1; \
    echo "$how: lifetimes rc $? $(tail -1 $R/life_$how.txt)")
done
tar czf $OUT/c4.tgz -C $OUT c4; echo "call4 done [$((SECONDS - t0)) s]"

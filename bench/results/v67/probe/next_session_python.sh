#!/usr/bin/env bash
# Prepared for the next session (not run): the Python GPU tier on main (after v67: ExpertWeights.pack_pieces and its
# API-surface recipe have not run on a GPU) with the extension module of .carry/v102p (feat/pieces 3d597f0's C++
# binding: the same as main's) placed beside the package sources. One H200, one call.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102p; mkdir -p $V; xz -dc .carry/v102p/bins.tar.xz | tar xf - -C $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout 500 python3 -m pytest -q -m gpu > $R/py_gpu.txt 2>&1; echo "py gpu rc $? [$((SECONDS - t0)) s]")
tail -8 $R/py_gpu.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

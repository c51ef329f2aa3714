#!/usr/bin/env bash
# v67 c1d (one H200; carry .carry/v102p: the extension module rebuilt with pack_pieces' gate_up accepting None): the
# Python GPU tests that touch pieces (the API surface's GPU variant with its pack_pieces recipe; the layer tier).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102p; mkdir -p $V; xz -dc .carry/v102p/bins.tar.xz | tar xf - -C $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout 200 python3 -m pytest -q test_api_surface.py test_moe_layer_gpu.py > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
tail -8 $R/py.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v70 h (one H200): branch feat/op-pieces' extension (.carry/v113p; torch.ops.fp4gemm.fused_experts(..., weight_layout)) beside the sources: the Python GPU tier.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
V=/tmp/v113p; mkdir -p $V; xz -dc .carry/v113p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout ${PYT:-300} python3 -m pytest -q -rs ${PYSEL:-test_pieces.py test_transformers_gpu.py test_api_surface.py test_random_sequences.py} > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
tail -6 $R/py.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v70 f (one H200): branch feat/pieces-nv9op's extension (.carry/v111p) beside the sources: the pieces round trip for
# both formats (test_pieces.py), the transformers GPU tests (pieces undone by tests/python/pieces_layout.py), the API
# surface (pack_pieces recipe, ExpertWeights.pack_pieces NVFP4 / MXFP4 layers byte-equal to rows), random sequences.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
V=/tmp/v111p; mkdir -p $V; xz -dc .carry/v111p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout ${PYT:-300} python3 -m pytest -q -rs ${PYSEL:-test_pieces.py test_transformers_gpu.py test_api_surface.py test_random_sequences.py} > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]")
tail -6 $R/py.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

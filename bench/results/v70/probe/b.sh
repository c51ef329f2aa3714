#!/usr/bin/env bash
# v70 b (one H200): branch exp/pieces-9op: the Python GPU tier (.carry/v110p = the branch's extension beside the
# sources), then the branch's CLI (.carry/v110c... carried in the same call? no: one 16 MB binary per call) -- see c.sh.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
V=/tmp/v110p; mkdir -p $V; xz -dc .carry/v110p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout 500 python3 -m pytest -q -rs -m gpu > $R/py_gpu.txt 2>&1; echo "py gpu rc $? [$((SECONDS - t0)) s]")
tail -8 $R/py_gpu.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v109 call 10: call9.sh without the build on the GPU machine. Carries main's CLI and Python extension built on the
# CPU machine from this commit (.carry/main_cli.tar.xz: tools/fp4gemm; .carry/ext312.tar.xz: _fp4gemm for CPython
# 3.12) and lays them out as v95's table.sh build folder (/tmp/b, marked built). On an H200: v108's call6.sh (issue
# 52's H200 table, ROUND_REPS rounds of triton_kernels' layer and fp4gemm's in the same run, then the W4A4 NVFP4
# cells). On any other card: call9.sh's stall samples (v108 call8's measurement). Carry .carry/peers,
# .carry/main_cli.tar.xz and .carry/ext312.tar.xz (trim.sh out with KEEP="v95 v102 v106 v108 v109").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
B=/tmp/b; mkdir -p $B/python /tmp/xm
xz -dc .carry/main_cli.tar.xz | tar xf - -C $B && xz -dc .carry/ext312.tar.xz | tar xf - -C $B/python && touch $B/built
ls -la $B/tools/fp4gemm $B/python/_fp4gemm*.so
PYTHONPATH=$B/python timeout 60 python3 -c "import _fp4gemm; print('extension loads')" 2>&1 | tail -3
exec bash bench/results/v109/probe/call9.sh

#!/usr/bin/env bash
# v66 c12 -- prepared, not run (no device time left in session 79). One H200: main c213566's CLI (the layer built on its weights' stream) -- the layer suite's general path with
# digests, to compare with main's earlier bytes (c10 / c11), and the CLI layer command at gpt-oss T 1 (decode path).
# Carry .carry/v99 (cli_fixed).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v99; mkdir -p $V; xz -dc .carry/v99/bins.tar.xz | tar xf - -C $V; R=$OUT/r; mkdir -p $R
FP4GEMM_DIGEST=1 timeout 100 $V/cli_fixed bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 > $R/layer.txt 2>&1; echo "rc $?"
grep "^digest" $R/layer.txt > $R/layer.dig; wc -l < $R/layer.dig
timeout 60 $V/cli_fixed layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --act bf16 --values checkpoint --scales linear --iters 100 --tokens 1 2>&1 | grep -E "^time|decode path" | head -3

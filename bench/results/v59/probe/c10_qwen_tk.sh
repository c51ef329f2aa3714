#!/usr/bin/env bash
# v59 c10 (prepared, not run: no device time left): c10_qwen_tk.py with main's package (.carry/pkg_main, 1efc4d5's kernels) and the new one (.carry/pkg_ring), twice.
cd "$(dirname "$0")/../../../.."
for r in 1 2; do for v in pkg_main pkg_ring; do PYTHONPATH=$PWD/.carry/$v timeout 150 python3 bench/results/v59/probe/c10_qwen_tk.py $v 2>&1 | tail -26; done; done

#!/usr/bin/env bash
# For the next session, on a checkout of branch feat/hf-nvfp4-pieces (Python only): quantize_experts' default layout
# for NVFP4 W4A4 becomes pieces. Carry .carry/v113p (main's extension, the same C++): the transformers GPU tests,
# then merge if green.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
PYSEL="-m gpu test_transformers_gpu.py" PYT=400 bash bench/results/v70/probe/h.sh

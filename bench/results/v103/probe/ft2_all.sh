#!/usr/bin/env bash
# v103: the gated exp/fused-trigger in one call: the three-arm A/B (ft2.sh, .carry/pg_ft2.tar.xz), then the GPU suites and
# the sanitizers with the branch's CPU-built test binary (ft_tests.sh, .carry/gt_ft2.tar.xz).
cd "$(dirname "$0")"
bash ft2.sh 2>&1 | grep -v "^layer "
GT=.carry/gt_ftf.tar.xz bash ft_tests.sh

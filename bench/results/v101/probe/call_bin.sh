#!/usr/bin/env bash
# v101 (session 114): exp/producer-gather3 (`../producer_gather3.patch`) timed from a CLI built on the CPU machine
# (nvcc 13.0, sm_90a) and carried, one binary per call (the working tree's 64 MiB cannot hold two; /tmp/pg keeps
# an earlier call's while the machine stays warm):
#   .carry/pg_d.tar.xz  d/fp4gemm  the branch's CLI (glu-build/tools/fp4gemm)
#   .carry/pg_m.tar.xz  m/fp4gemm  main's CLI (main-build/tools/fp4gemm)
# v100's `call_bin.sh` does the work (arms m / e / d / f, an A/B round, the layer suite's digests against main's);
# here arm f is d with FP4GEMM_EXP_NO_CFENCE=1 (the consumers' proxy fence left out: timing only, to price it;
# unsafe by the memory model even where its bytes match) unless F_ENV names another setting
# (F_ENV=FP4GEMM_EXP_GATHER_WARPS=2 for form 2's second warp; =1 for form 3's one-warp fallback).
# Logs: /tmp/pb, tarred into $OUT/pb.tgz.
F_ENV=${F_ENV:-FP4GEMM_EXP_NO_CFENCE=1} exec bash "$(dirname "$0")/../../v100/probe/call_bin.sh" "$@"

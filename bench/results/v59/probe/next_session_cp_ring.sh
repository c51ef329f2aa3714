#!/usr/bin/env bash
# For the next session (one H200, ~5 min): why the cp.async ring (branch decode-cp-ring) is 4-12 % faster on every decode
# cell of the CLI (blocked scales) but 8 / 12 % slower at Qwen3 T 4 / 8 in tk_layer (linear scales, interleaved w13, ids
# sorted per token; v59 c9 against v58's table). Carry .carry/v60 (CLIs of main 24e3a1d and of the branch, both with
# `layer --scales`), .carry/pkg_main and .carry/pkg_ring (the packages) and .peers.
#   1. CLI A/B, main vs ring, blocked vs linear scales, 2 rounds: Qwen3 T 1 / 4 / 8 (silu, stacked w13 and swigluoai,
#      interleaved), gpt-oss T 1 / 4 -- does the linear layout alone turn the ring's gain into a loss?
#   2. tk_layer.py with both packages in the same call, T 1-8 (a same-run baseline for the issue table's decode cells)
#   If (1) shows it: the code words' cp.async.ca copies (linear codes are reused across a unit's chunks from L1; blocked
#   ones are not) -- try .cg for them, or keep the codes' loads in registers one stage ahead.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v60; mkdir -p $V; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for f in .carry/v60/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --iters 100"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint --iters 100"
for rnd in 1 2; do for v in main ring; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 4 8; do timeout 60 $B $Q --scales $sl --tokens $t > $R/q${t}_${v}_${sl}_$rnd.txt 2>&1
    timeout 60 $B $Q --activation swigluoai --scales $sl --tokens $t > $R/qs${t}_${v}_${sl}_$rnd.txt 2>&1; done
  for t in 1 4; do timeout 60 $B $G --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"; tar czf $OUT/r.tgz -C $OUT r
for v in pkg_main pkg_ring; do mkdir -p $R/tk_$v
  PYTHONPATH=$PWD/.carry/$v:$PWD/.peers OUT=$R/tk_$v TKL_TOKENS=1,2,4,8 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=120 \
    timeout 200 python3 .peers/tk_layer.py > $R/tk_$v/tk_layer.txt 2>&1
done; echo "[$((SECONDS - t0)) s] tk_layer"; tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in q1 q4 q8 qs1 qs4 qs8 g1 g4; do for sl in blocked linear; do for v in main ring; do
  echo "$c $sl $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${v}_${sl}_1.txt)"
done; done; done
for v in pkg_main pkg_ring; do echo "== $v"; grep -A12 "CUDA graph replay" tk_$v/tk_layer.txt | head -12; done

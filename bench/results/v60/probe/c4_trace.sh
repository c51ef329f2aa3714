#!/usr/bin/env bash
# v60 c4: where the merged decode path's time goes (trace build: each warp's %globaltimer at each phase of the last
# launch; fp4gemm layer prints median / latest per phase). Qwen3 T 1 / 4 / 8, gpt-oss T 1 / 4, linear scales (tk_layer's
# layout), W4A16; plus the same CLI without the trace build for the totals. Carry .carry/v64.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v64; mkdir -p $V; t0=$SECONDS
for f in .carry/v64/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --activation swigluoai --scales linear"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --values checkpoint --activation swigluoai --scales linear"
for v in trace plain; do
  for t in 1 4 8; do timeout 60 $V/fp4gemm_$v $Q --iters 100 --tokens $t > $R/q${t}_$v.txt 2>&1; done
  for t in 1 4; do timeout 60 $V/fp4gemm_$v $G --iters 100 --tokens $t > $R/g${t}_$v.txt 2>&1; done
done
for c in q1 q4 q8 g1 g4; do echo "== $c plain $(grep -E '^time' $R/${c}_plain.txt | cut -c1-40) trace $(grep -E '^time' $R/${c}_trace.txt | cut -c1-40)"; grep -A24 "decode trace" $R/${c}_trace.txt | head -24; done
tar czf $OUT/r.tgz -C $OUT r

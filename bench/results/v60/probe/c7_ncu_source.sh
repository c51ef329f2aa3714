#!/usr/bin/env bash
# v60 c7: where the decode kernels' stall samples land, per SASS instruction (ncu SourceCounters), at Qwen3 swigluoai T 1
# and gpt-oss T 1, linear scales: the data for attacking the fixed cost (prologues, routing read; v60 c4 trace).
# Carry .carry/v64 (main d211b1f's CLI).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v64; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v64/fp4gemm_plain.xz > $V/fp4gemm; chmod +x $V/fp4gemm
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --activation swigluoai --scales linear --tokens 1"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --values checkpoint --activation swigluoai --scales linear --tokens 1"
NCU="ncu --clock-control none -k regex:decode_ --launch-skip 2 --launch-count 2 --section SourceCounters --section WarpStateStats --import-source no"
timeout 100 $NCU -o $R/q1 $V/fp4gemm $Q --iters 2 --warmup 1 > $R/q1.log 2>&1; echo "q1 rc=$? [$((SECONDS - t0)) s]"
timeout 100 $NCU -o $R/g1 $V/fp4gemm $G --iters 2 --warmup 1 > $R/g1.log 2>&1; echo "g1 rc=$? [$((SECONDS - t0)) s]"
for c in q1 g1; do
  ncu -i $R/$c.ncu-rep --page source --csv --print-source sass > $R/${c}_source.csv 2> $R/${c}_source.err || \
  ncu -i $R/$c.ncu-rep --page source --csv > $R/${c}_source.csv 2>> $R/${c}_source.err
  ncu -i $R/$c.ncu-rep --page details --csv > $R/${c}_details.csv 2>&1
  wc -l $R/${c}_source.csv; head -c 300 $R/${c}_source.err
done
rm -f $R/*.ncu-rep; tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s]"

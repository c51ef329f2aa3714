#!/usr/bin/env bash
# Per-instruction executed counts and stall samples of the decode kernels on checkpoint-range MXFP4 scales (the one-
# multiply decode real weights take), main 1efc4d5, gpt-oss T 1 and Mixtral T 1. Carry .carry/build.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
cp .carry/build/tools/fp4gemm $V/fp4gemm_main
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 3 --warmup 2 --tokens 1 --values checkpoint"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 3 --warmup 2 --tokens 1 --values checkpoint"
for c in G M; do
  timeout 200 ncu --clock-control none -k regex:decode_ --launch-skip 4 --launch-count 2 --section SourceCounters --section InstructionStats \
    -o $R/src_$c $V/fp4gemm_main ${!c} > $R/src_$c.log 2>&1; echo "$c rc=$?"
  for k in decode_gate_up decode_down_combine; do
    ncu -i $R/src_$c.ncu-rep -k regex:$k --page source --csv --print-source sass > $R/${c}_$k.csv 2>$R/${c}_$k.err || \
    ncu -i $R/src_$c.ncu-rep -k regex:$k --page source --csv > $R/${c}_$k.csv 2>>$R/${c}_$k.err
    echo "$c $k $(wc -l < $R/${c}_$k.csv) lines"; head -c 600 $R/${c}_$k.csv; echo; done
  ncu -i $R/src_$c.ncu-rep --page details > $R/${c}_details.txt 2>&1
done
rm -f $R/*.ncu-rep; gzip -9 $R/*.csv; tar czf $OUT/r.tgz -C $OUT r

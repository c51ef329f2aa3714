#!/usr/bin/env bash
# v59 c3: the TMA ring with one copy of its loop body (branch exp/decode-tma-rolled; FP4GEMM_TMA_STAGES 3, 4, 5) against main (base).
# Digests (identical expected), CLI timings 2 rounds interleaved (checkpoint scales), ncu warp stalls at gpt-oss T 4.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v59c; mkdir -p $V; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
for f in .carry/v59c/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
VS="base roll3 roll4 roll5"
for v in $VS; do for act in bf16 nvfp4; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1
done; done
for v in roll3 roll4 roll5; do for act in bf16 nvfp4; do diff <(grep -i digest $R/suite_${act}_base.txt) <(grep -i digest $R/suite_${act}_$v.txt) > /dev/null \
  && echo "$v $act digests identical ($(grep -ci digest $R/suite_${act}_base.txt))" || echo "$v $act DIGESTS DIFFER"; done; done; snap digests
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --values checkpoint --iters 100"
for rnd in 1 2; do for v in $VS; do B=$V/fp4gemm_$v
  for t in 1 2 4; do timeout 60 $B $G --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B ${G/bf16/nvfp4} --tokens 2 > $R/gn2_${v}_$rnd.txt 2>&1
  for t in 1 4 8; do timeout 60 $B $Q --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B ${Q/bf16/nvfp4} --tokens 1 > $R/qn1_${v}_$rnd.txt 2>&1
  for t in 1 4; do timeout 60 $B $M --tokens $t > $R/m${t}_${v}_$rnd.txt 2>&1; done
done; done; snap timings
for v in base roll4; do
  timeout 100 ncu --clock-control none -k regex:decode_ --launch-skip 2 --launch-count 2 --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section SpeedOfLight -o $R/ncu_g4_$v $V/fp4gemm_$v ${G/--iters 100/--iters 1 --warmup 1} --tokens 4 > $R/ncu_g4_$v.log 2>&1
  ncu -i $R/ncu_g4_$v.ncu-rep --page raw --csv > $R/ncu_g4_${v}_raw.csv 2>&1; rm -f $R/ncu_g4_$v.ncu-rep
done; snap ncu
cd $R; for c in g1 g2 g4 gn2 q1 q4 q8 qn1 m1 m4; do for v in $VS; do
  echo "$c $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${v}_1.txt)"
done; done

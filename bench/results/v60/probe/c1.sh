#!/usr/bin/env bash
# v60 c1: the ring's linear-scale loss (c0: Qwen3 swigluoai/interleaved T 4 / 8 +9 / +13 % on linear scales, gains on
# blocked). CLI A/B of main, ring, and ring with the codes read by ld.global.nc into registers (DECODE_CODES_LDG), then
# ncu of the three at Qwen3 swigluoai T 8 linear (and ring blocked). Carry .carry/v61.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v61; mkdir -p $V; t0=$SECONDS
for f in .carry/v61/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint"
for rnd in 1 2; do for v in main ring ldg; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 4 8; do timeout 60 $B $Q --iters 100 --scales $sl --tokens $t > $R/q${t}_${v}_${sl}_$rnd.txt 2>&1
    timeout 60 $B $Q --iters 100 --activation swigluoai --scales $sl --tokens $t > $R/qs${t}_${v}_${sl}_$rnd.txt 2>&1; done
  for t in 1 4; do timeout 60 $B $G --iters 100 --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"
cd $R; for c in q1 q4 q8 qs1 qs4 qs8 g1 g4; do for sl in blocked linear; do echo "$c $sl $(for v in main ring ldg; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_${sl}_1.txt)"; done; done | tee $R/summary.txt
cd - >/dev/null; tar czf $OUT/r.tgz -C $OUT r
NCU="ncu --clock-control none -k regex:decode_ --launch-skip 2 --launch-count 2 --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section InstructionStats"
for v in main ring ldg; do for sl in linear blocked; do [ $v != ring ] && [ $sl = blocked ] && continue
  timeout 120 $NCU -o $R/ncu_${v}_$sl $V/fp4gemm_$v $Q --activation swigluoai --scales $sl --tokens 8 --iters 2 --warmup 1 > $R/ncu_${v}_$sl.log 2>&1
  ncu -i $R/ncu_${v}_$sl.ncu-rep --page raw --csv > $R/ncu_${v}_$sl.csv 2>&1
done; done; echo "[$((SECONDS - t0)) s] ncu"
tar czf $OUT/r.tgz -C $OUT r

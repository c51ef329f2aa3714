#!/usr/bin/env bash
# Prepared for the next session (not run): three measurements left by v65, in one call on one H200.
#   (1) issue 51's last cell in the trace builds: 399676a (old_trace) against main acb7705 (main_trace), both
#       -DFP4GEMM_TRACE=ON: per-CTA mainloop / full-wait / epilogue cycles of class 9 (R 272) and of the uniform T 1024
#       cell -- which phase of a class-9 tile is still ~1 % longer. (Also the first run of the fixed trace build: its
#       counters must be non-zero, read from the launched variant's unit.)
#   (2) exp/host-rul10 (H: the pointer-array units at register-usage level 10) against main (N): seed, dense, dual
#       suites with digests, 2 rounds per side.
#   (3) exp/decode-rul10 (D: the decode kernels at level 10) against main (N): the CLI layer at T 1 / 2 / 4 / 8,
#       gpt-oss-120b and Qwen3-30B-A3B shapes, W4A16 (checkpoint values, linear scales) and W4A4 NVFP4, 2 rounds.
# Binaries (build each on the CPU machine; carry in two or three calls back to back, each one solid xz under
# .carry/v91*, unpacked to /tmp/v91 -- the 64 MiB limit; a call that finds fewer than six only unpacks):
#   cli_old_trace   399676a, cmake -DFP4GEMM_TRACE=ON (its one fused unit takes ~16 min here)
#   cli_main_trace  main, -DFP4GEMM_TRACE=ON;   cli_main  main;   cli_host  exp/host-rul10;   cli_decode  exp/decode-rul10
#   cli_old         399676a (+ ../../v50/probe/old_cli_digest.patch), for (1)'s plain times beside the traces
# Session 78 left them packed, if the checkout survives: .carry/v91a (cli_old, cli_old_trace: 24 MB), .carry/v91b
# (cli_main_trace, cli_main: 20 MB), .carry/v91c (cli_host, cli_decode: 20 MB), main = acb7705's kernels. Carry one per
# call, the three calls back to back: carry [".carry/v91a"], then v91b, then v91c (the third runs everything).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v91; mkdir -p $V; t0=$SECONDS
for d in .carry/v91a .carry/v91b .carry/v91c; do [ -f $d/bins.tar.xz ] && xz -dc $d/bins.tar.xz | tar xf - -C $V; done
ls $V; [ $(ls $V | grep -c '^cli_') -lt 6 ] && { echo "unpacked only"; exit 0; }
R=$OUT/r; mkdir -p $R/trace $R/hs $R/dec
M="moe --experts 8 --n 4096 --k 14336 --topk 2 --act bf16 --scales linear --out f16 --values full"
for b in old_trace main_trace old main; do
  for cell in "--tokens 1088 --routing balanced" "--tokens 1024 --routing uniform"; do
    echo "== $b $cell" >> $R/trace/$b.txt
    timeout 60 $V/cli_$b $M $cell --iters 20 >> $R/trace/$b.txt 2>&1
  done
done
echo "traces [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for side in A B; do b=$V/cli_main; [ $side = B ] && b=$V/cli_host
  for s in seed dense dual; do timeout 100 $b bench --suite $s --settle-ms 100 --json $R/hs/${s}_${side}$rnd.json > $R/hs/${s}_${side}$rnd.txt 2>&1; done
done; done
python3 bench/results/v50/probe/ab_compare.py $R/hs > $R/hs/compare.txt 2>&1; cat $R/hs/compare.txt
echo "pointer-array suites [$((SECONDS - t0)) s]"
unset FP4GEMM_DIGEST
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for v in main decode; do B=$V/cli_$v
  for t in 1 2 4 8; do
    timeout 30 $B $Q --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/dec/q${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/dec/g${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $Q --act nvfp4 --iters 100 --tokens $t > $R/dec/nq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act nvfp4 --iters 100 --tokens $t > $R/dec/ng${t}_${v}_$rnd.txt 2>&1
  done
done; done
grep -H -oE "^time: [0-9.]+" $R/dec/*.txt | sed 's|.*/||' | sort > $R/dec/times.txt; cat $R/dec/times.txt
(cd $OUT && tar czf r.tgz r && rm -rf r)
echo "done [$((SECONDS - t0)) s]"

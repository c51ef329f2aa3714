#!/usr/bin/env bash
# v60 c5: linear scale codes loaded one chunk ahead on the multiply side (exp/codes-ahead), no register rotation: c4's
# trace showed the ring's first copies taking 1.3-3.5 us on linear scales (each rotation move waits for a code load
# queued behind the weights). Carry .carry/v65: CLIs plain (main d211b1f), ahead, ahead's trace build (main's linear traces: c4); ahead's GPU tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v65; mkdir -p $V; t0=$SECONDS
for f in .carry/v65/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
export FP4GEMM_CLI=$V/fp4gemm_ahead
timeout 200 $V/gpu_tests_ahead --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint"
for rnd in 1 2; do for v in plain ahead; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 4 8; do timeout 60 $B $Q --iters 100 --activation swigluoai --scales $sl --tokens $t > $R/qs${t}_${v}_${sl}_$rnd.txt 2>&1; done
  timeout 60 $B $Q --iters 100 --scales $sl --tokens 1 > $R/q1_${v}_${sl}_$rnd.txt 2>&1
  for t in 1 4; do timeout 60 $B $G --iters 100 --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 qs1 qs4 qs8 g1 g4; do for sl in blocked linear; do echo "$c $sl $(for v in plain ahead; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_${sl}_1.txt)"; done; done | tee $R/summary.txt)
for v in ahead_trace; do for sl in blocked linear; do
  timeout 60 $V/fp4gemm_$v $Q --activation swigluoai --iters 100 --tokens 1 --scales $sl > $R/tq1_${v}_$sl.txt 2>&1
  timeout 60 $V/fp4gemm_$v $G --iters 100 --tokens 1 --scales $sl > $R/tg1_${v}_$sl.txt 2>&1; done; done
for c in tq1 tg1; do for sl in blocked linear; do for v in ahead_trace; do echo "== $c $sl $v"; grep -E "kernel . (entry|routing read|cta share|cursor|ring issued|first chunk|stream-K done|exit)" $R/${c}_${v}_$sl.txt | sed 's/ (2[01][0-9]* warps)//' | tr '\n' ';'; echo; done; done; done
tar czf $OUT/r.tgz -C $OUT r

#!/usr/bin/env bash
# The decode's one-multiply MXFP4 path extended to scale code 128 (main + this change, .carry/build, .carry/pkg):
# GPU tests (routing / layer / decode / graph / stream-K / CLI), memcheck of the decode test, racecheck through the
# CLI on small layers with the decode path forced (both weight-scale sets), Python GPU tests, and the CLI A/B against
# the build before (e851cdf: .carry/v58z/main2.xz) on GPU MODE's and checkpoint scales, 2 rounds.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
xz -dc .carry/v58z/main2.xz > $V/old; chmod +x $V/old
B=.carry/build; NEW=$B/tools/fp4gemm
timeout 240 $B/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" $R/gtest.log | head -12; snap gtest
timeout 170 compute-sanitizer --tool memcheck $B/tests/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.Every*' > $R/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | tail -3; snap memcheck
for vals in gpumode checkpoint; do
  timeout 120 compute-sanitizer --tool racecheck $NEW layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --act bf16 --decode-tokens 8 --iters 1 --warmup 1 --values $vals > $R/racecheck_$vals.log 2>&1
  echo "racecheck $vals rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/racecheck_$vals.log | tail -1)"
done; snap racecheck
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 100"
for rnd in 1 2; do for b in old:$V/old new:$NEW; do IFS=: read n bin <<< "$b"; for vals in gpumode checkpoint; do
  for t in 1 2 4; do timeout 60 $bin $G --values $vals --tokens $t > $R/g${t}_${n}_${vals}_$rnd.txt 2>&1; done
  for t in 1 4 8; do timeout 60 $bin $Q --values $vals --tokens $t > $R/q${t}_${n}_${vals}_$rnd.txt 2>&1; done
  timeout 60 $bin $M --values $vals --tokens 1 > $R/m1_${n}_${vals}_$rnd.txt 2>&1
done; done; done; snap timings
(cd $R; for c in g1 g2 g4 q1 q4 q8 m1; do for vals in gpumode checkpoint; do for n in old new; do
  echo "$c $vals $n $(for r in 1 2; do grep -E '^time' ${c}_${n}_${vals}_$r.txt | cut -c7-13; done | tr '\n' ' ')"; done; done; done)
export PYTHONPATH=$PWD/.carry/pkg
FP4GEMM_RANDOM_LONG=80 FP4GEMM_RANDOM_SEED=$RANDOM timeout 200 python3 -m pytest -q -m gpu tests/python/test_random_sequences.py > $R/py_random.log 2>&1
echo "py random rc=$?: $(tail -1 $R/py_random.log) $(grep -m1 -o 'seed [0-9]*' $R/py_random.log)"
timeout 200 python3 -m pytest -q -m gpu tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py > $R/py_layer.log 2>&1
echo "py layer rc=$?: $(tail -1 $R/py_layer.log)"; snap python

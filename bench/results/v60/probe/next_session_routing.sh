#!/usr/bin/env bash
# For the next session (one H200, ~4 min): the decode kernels' fixed cost (v60 c7: half of each kernel's samples at T 1
# outside its streaming loop). Carry .carry/v66 (xz): CLIs of main d211b1f (plain), exp/routing-fast 69f1ddc (rt: the
# slot numbering straight-line, 683 -> 306 static instructions between the routing barriers) and exp/prologue-codes
# 4b3f49d (pro: rt + the ring's first fill keeping the linear codes' addresses, loading them after it); pro's GPU tests.
#   1. pro's routing / layer / graph / stream-K / CLI gtests, memcheck of the decode tests, racecheck via the CLI
#   2. layer-suite digests plain vs rt vs pro (identical expected: the numbering is the same, checked on 200,000
#      random routings in a Python emulation of both)
#   3. CLI A/B, 2 rounds: Qwen3 swigluoai T 1 / 2 / 4 / 8 and gpt-oss T 1 / 2 / 4, linear and blocked scales
#   Expected: rt -0.5..-1 us at T 1-4 (both kernels read the routing); pro a further -0.5..-2 us on linear only.
#   If they hold: merge exp/prologue-codes, rebuild the package, tk_layer + the Python GPU tier (c3's script).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v66; mkdir -p $V; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for f in .carry/v66/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
export FP4GEMM_CLI=$V/fp4gemm_pro
timeout 200 $V/gpu_tests_pro --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
timeout 150 compute-sanitizer --tool memcheck $V/gpu_tests_pro --gtest_filter='MoeLayerDecode.Every*:MoeLayerBiases*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
for sl in blocked linear; do
  timeout 100 compute-sanitizer --tool racecheck $FP4GEMM_CLI layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --act bf16 --values checkpoint --scales $sl --activation swigluoai > $R/racecheck_$sl.log 2>&1
  echo "racecheck $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_$sl.log | tail -1)"; done
for act in bf16 nvfp4; do for v in plain rt pro; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1; done
  for v in rt pro; do diff <(grep -i digest $R/suite_${act}_plain.txt) <(grep -i digest $R/suite_${act}_$v.txt) > /dev/null \
    && echo "$act $v digests identical ($(grep -ci digest $R/suite_${act}_plain.txt))" || echo "$act $v DIGESTS DIFFER"; done; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint"
for rnd in 1 2; do for v in plain rt pro; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 60 $B $Q --iters 100 --scales $sl --tokens $t > $R/q${t}_${v}_${sl}_$rnd.txt 2>&1; done
  for t in 1 2 4; do timeout 60 $B $G --iters 100 --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q2 q4 q8 g1 g2 g4; do for sl in blocked linear; do echo "$c $sl $(for v in plain rt pro; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_${sl}_1.txt)"; done; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r

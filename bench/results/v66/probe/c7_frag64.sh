#!/usr/bin/env bash
# v66 c7 (one H200): exp/decode-frag64 -- the MXFP4 decode kernels on k-block pieces (per 16 rows and 64-wide k-block
# 512 B, lane (g, c) holding bytes 8c..8c+7 of rows g and g + 8: the layout the fused kernel's consumer threads read,
# so one layout could serve both paths), two scale codes per row per chunk, the activations permuted; W4A16 only.
# Sides: M = main's CLI, F = exp/decode-frag (1 KB chunks, c4), P = exp/decode-frag64; F and P with
# FP4GEMM_EXP_DECODE_FRAG=1 (P's MXFP4 decode path requires it).
#   (1) P's layer gtests with the variable (MoeLayer*) and memcheck of the decode test;
#   (2) the layer suite's W4A16 digests (GPU MODE values: exact sums, so any k order gives the same bytes), M against P;
#   (3) the CLI layer at T 1 / 2 / 4 / 8, gpt-oss-120b and Qwen3-30B-A3B, W4A16 checkpoint linear and blocked, M / F / P
#       interleaved, 2 rounds. Carry .carry/v95 (cli_main, cli_frag) and .carry/v96 (cli_f64, gpu_tests_f64).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v96; mkdir -p $V; for d in v95 v96; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done; t0=$SECONDS
R=$OUT/r; mkdir -p $R
export FP4GEMM_EXP_DECODE_FRAG=1
(timeout 200 $V/gpu_tests_f64 --gtest_filter='MoeLayer*' > $R/tests_f64.txt 2>&1; echo "rc $?" >> $R/tests_f64.txt)
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^rc" $R/tests_f64.txt
timeout 150 compute-sanitizer --tool memcheck $V/gpu_tests_f64 \
  --gtest_filter='MoeLayerDecode.EveryTokenCountAndRoutingMatchesTheComposition' > $R/memcheck_f64.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck_f64.txt | tail -3
echo "tests [$((SECONDS - t0)) s]"
for v in main f64; do FP4GEMM_DIGEST=1 timeout 100 $V/cli_$v bench --suite layer --act bf16 --settle-ms 100 > $R/suite_bf16_$v.txt 2>&1; done
diff <(grep "^digest" $R/suite_bf16_main.txt) <(grep "^digest" $R/suite_bf16_f64.txt) > $R/digest_diff.txt \
  && echo "digests bf16: identical ($(grep -c '^digest' $R/suite_bf16_main.txt))" || { echo "digests bf16: DIFFER"; head $R/digest_diff.txt; }
echo "digests [$((SECONDS - t0)) s]"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for m in g q; do S=$Q; [ $m = g ] && S=$G; for t in 1 2 4 8; do for sc in linear blocked; do
  for sd in M F P; do b=$V/cli_f64; [ $sd = M ] && b=$V/cli_main; [ $sd = F ] && b=$V/cli_frag
    echo "$rnd $m $t $sc $sd $(timeout 30 $b $S --act bf16 --values checkpoint --scales $sc --iters 100 --tokens $t 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
  done
done; done; done; done > $R/times.txt
python3 - $R/times.txt <<'PY'
import sys, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6: t[tuple(f[1:5])].append(float(f[5]))
for m in "gq":
    for sc in ["linear", "blocked"]:
        for T in "1248":
            v = {s: sum(t[(m, T, sc, s)]) / max(len(t[(m, T, sc, s)]), 1) for s in "MFP"}
            print(f"{'gpt-oss' if m == 'g' else 'Qwen3':7} {sc:7} T {T}  M {v['M']:7.2f}  F {v['F']:7.2f} ({v['F']/v['M']-1:+.1%})  P {v['P']:7.2f} ({v['P']/v['M']-1:+.1%})")
PY
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

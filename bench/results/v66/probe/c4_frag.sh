#!/usr/bin/env bash
# v66 c4 (one H200): exp/decode-frag -- the decode kernels reading a copy of the weights repacked in the order they
# consume them (FP4GEMM_EXP_DECODE_FRAG=1: per unit and 128-wide chunk 1 KB, every warp load 512 contiguous bytes;
# bench/micro/decode_layout.cu, c3, predicted -10..-15 % of each stream). Sides: M = main's CLI (8aa7f4a), N = the
# branch without the variable (today's layout through the branch's code), F = the branch with it.
#   (1) the branch's layer GPU tests with and without the variable (MoeLayer*; with it, the in-place-update test is
#       expected to fail: the experiment's copy is made once), memcheck of the decode test with it;
#   (2) the layer suite's digests, M against F (W4A16, W4A4 NVFP4);
#   (3) the CLI layer at T 1 / 2 / 4 / 8, gpt-oss-120b and Qwen3-30B-A3B, W4A16 checkpoint linear and blocked, NVFP4
#       linear, sides M / N / F interleaved, 2 rounds, L2 flushed, median of 100.
# Carry .carry/v95 (cli_main, cli_frag, gpu_tests_frag).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v95; mkdir -p $V; xz -dc .carry/v95/bins.tar.xz | tar xf - -C $V; t0=$SECONDS
R=$OUT/r; mkdir -p $R
(FP4GEMM_EXP_DECODE_FRAG=1 timeout 200 $V/gpu_tests_frag --gtest_filter='MoeLayer*' > $R/tests_frag.txt 2>&1; echo "rc $?" >> $R/tests_frag.txt)
(timeout 200 $V/gpu_tests_frag --gtest_filter='MoeLayer*' > $R/tests_plain.txt 2>&1; echo "rc $?" >> $R/tests_plain.txt)
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^rc" $R/tests_frag.txt $R/tests_plain.txt
echo "tests [$((SECONDS - t0)) s]"
FP4GEMM_EXP_DECODE_FRAG=1 timeout 150 compute-sanitizer --tool memcheck $V/gpu_tests_frag \
  --gtest_filter='MoeLayerDecode.EveryTokenCountAndRoutingMatchesTheComposition' > $R/memcheck_frag.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck_frag.txt | tail -3
echo "memcheck [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for act in bf16 nvfp4; do
  timeout 100 $V/cli_main bench --suite layer --act $act --settle-ms 100 > $R/suite_${act}_M.txt 2>&1
  FP4GEMM_EXP_DECODE_FRAG=1 timeout 100 $V/cli_frag bench --suite layer --act $act --settle-ms 100 > $R/suite_${act}_F.txt 2>&1
  diff <(grep "^digest" $R/suite_${act}_M.txt) <(grep "^digest" $R/suite_${act}_F.txt) > /dev/null \
    && echo "digests $act: identical ($(grep -c '^digest' $R/suite_${act}_M.txt))" || echo "digests $act: DIFFER"
done
unset FP4GEMM_DIGEST
echo "digests [$((SECONDS - t0)) s]"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
run() {  # side model T kind -> time
  local b=$V/cli_frag env=""; [ $1 = M ] && b=$V/cli_main; [ $1 = F ] && env="FP4GEMM_EXP_DECODE_FRAG=1"
  local S=$Q; [ $2 = g ] && S=$G
  local a="--act bf16 --values checkpoint --scales linear"
  [ $4 = w16b ] && a="--act bf16 --values checkpoint --scales blocked"; [ $4 = nvl ] && a="--act nvfp4 --scales linear"
  env $env timeout 30 $b $S $a --iters 100 --tokens $3 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}'
}
for rnd in 1 2; do for m in g q; do for t in 1 2 4 8; do for kd in w16l w16b nvl; do for sd in M N F; do
  echo "$rnd $m $t $kd $sd $(run $sd $m $t $kd)"
done; done; done; done; done > $R/times.txt
python3 - $R/times.txt <<'PY'
import sys, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6: t[tuple(f[1:5])].append(float(f[5]))
for m in "gq":
    for kd in ["w16l", "w16b", "nvl"]:
        for T in "1248":
            v = {s: sum(t[(m, T, kd, s)]) / max(len(t[(m, T, kd, s)]), 1) for s in "MNF"}
            print(f"{'gpt-oss' if m == 'g' else 'Qwen3':7} {kd:5} T {T}  M {v['M']:7.2f}  N {v['N']:7.2f} ({v['N']/v['M']-1:+.1%})  F {v['F']:7.2f} ({v['F']/v['M']-1:+.1%}, {v['F']-v['M']:+.2f} us)")
PY
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

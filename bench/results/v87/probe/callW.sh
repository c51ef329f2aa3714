#!/usr/bin/env bash
# Prepared in v87 (session 100), not run (the session's device time was spent): the variable-group wide kernels in
# phases -- branch exp/vg-slots after 06f40ed (= probe/vg_phases.patch on top of probe/vg_slots.patch): super-slots of up
# to 3 slots (kDecodeWideGroupsMax; wide_gmax = what one super-slot's rows fit in each kernel's staging), a CTA's share
# cut at super-slot boundaries into phases that fit its staging (decode::for_each_phase: rings drained and the CTA met
# between phases), so gpt-oss-120b's 5.7 KB rows take 3 groups. SASS (CPU machine, nvcc 13.0): the two GM 3 kernels
# 120 / 123 registers, no stack, 48 HMMA each; GM 4 spilled (128 registers, 8 B stack), so 3.
# BUNDLE v38: vg2/{cli,gt} (the branch with phases), m1/cli (main f27528e). If .carry/v38 is gone: build the branch
# (Release, tests + tools), strip tools/fp4gemm and tests/fp4gemm_gpu_tests into vg2/, main's CLI into m1/, tar | xz.
# PART 1 (~4 min): the decode / pieces gtests (new: MoeLayerDecode.WidePathVariableGroupsInPhases), the A/B (issue 52's cells: unchanged expected; Qwen3's dims with 16 / 32 experts
# and gpt-oss's with 16 / 32 experts at --decode-tokens 64 / 128: variable groups, against m1 and the general path).
# PART 2: memcheck of the two wide-path tests with variable groups; PART 3: racecheck of the phases test.
# Then the whole C++ GPU tier (4 shards), CLI sanitizers of the W4A4 decode path and the Python GPU tier on the branch's
# build (vg2/py: its extension for CPython 3.12, linked against the same CMake build), ~6 min:
#   BUNDLE=v38 M=vg2 NSH=4 SHT=330 PYTESTS="." PYT=330 NAME=w_val bash bench/results/v78/probe/val.sh Then, if green: the rest of the C++ GPU tier and the Python GPU tier on
# a build of the branch (bench/results/v78/probe/val.sh), and merge.
# Also (4e240a7): the variable-group kernels' own pre-pass for up to 4096 pairs over at most 128 experts
# (decode_wide_prep_vg: 1024 threads, 4096-bit masks, per-word counts), so `--decode-tokens 512` takes issue 52's T 512
# cells onto them (the layer's own bound is unchanged: it never gives 8 pairs per expert).
# Predictions: gpt-oss-120b T 512 (16 pairs per expert: super-slots of 2-3): ~560-600 µs against the general path's 759;
# Qwen3-30B-A3B T 512 (32 per expert: 4-5 slots, super-slots of 3 + 1-2): ~160-190 against 235; gpt-oss dims E 32
# T 128 (16 per expert): the wide path 1.26 of the general path (v84) -> ~0.85; Qwen3 dims E 16 T 64: 58.9 -> ~54 µs.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran|Failure|error" "$1" | head -${2:-14}; }
if [ "${PART:-1}" = 1 ]; then
  timeout 240 /tmp/vg2/gt --gtest_filter="${GF:-MoeLayerDecode.*:MoeLayerPieces.*}" > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt 20
  shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                       qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                       q16) echo "--experts 16 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                       q32) echo "--experts 32 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                       g16) echo "--experts 16 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                       g32) echo "--experts 32 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";; esac; }
  # case: shape, T, the decode bound for m1 and vg2 (-1: the layer's own); "gen" is vg2 with --decode-tokens 8 (the
  # general path past 8 tokens). "gptoss 64 512" / "qwen3 64 512": a variable-group plan at T 64 (2 / 4 pairs per
  # expert: super-slots of one slot) against main's one-slot kernels -- what the GM 3 code costs where it gains nothing
  # (if it shows, the run could pick the kernels by its own T x k / E on the host)
  for r in 1 2; do
  for cs in "gptoss 16 -1" "gptoss 64 -1" "gptoss 128 -1" "qwen3 16 -1" "qwen3 64 -1" "gptoss 64 512" "qwen3 64 512" "gptoss 256 512" "gptoss 512 512" \
            "qwen3 128 512" "qwen3 256 512" "qwen3 512 512" "q16 64 64" "q16 32 64" "q32 64 64" "g16 128 128" "g32 128 128"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in m1 vg2 gen; do
      b=$v; extra="--decode-tokens $3"; [ $v = gen ] && b=vg2 && extra="--decode-tokens 8"
      f=$R/ab_${v}_$1_t$2_r$r.txt
      timeout 60 /tmp/$b/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint $extra \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line $(grep -oE 'up to [0-9] slots' $R/ab_vg2_$1_t$2_r$r.txt | head -1)"
  done; done
  echo "[$((SECONDS - t0)) s]"
fi
if [ "${PART:-1}" = 2 ]; then  # (each sanitizer up to 270 s: the phases test runs 5 layers, up to 4096 pairs)
  timeout 270 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/vg2/gt \
    --gtest_filter='MoeLayerDecode.WidePathMatchesTheComposition:MoeLayerDecode.WidePathVariableGroupsInPhases' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
if [ "${PART:-1}" = 3 ]; then
  timeout 270 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 /tmp/vg2/gt \
    --gtest_filter=MoeLayerDecode.WidePathVariableGroupsInPhases > $R/racecheck.txt 2>&1
  echo "racecheck rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $R/racecheck.txt | head -3
fi
tar czf $OUT/${NAME:-w}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v87 call V (one H200): the variable-group wide kernels (branch exp/vg-slots: up to 2 slots of an expert per weight
# read, W4A16 / W4A4 MXFP4 on pieces with blocked scales, chosen where the pairs per expert average >= 8 and the staging
# fits). BUNDLE v37: vg/{cli,gt} (the branch), m1/cli (main f27528e). PART 1: the decode / pieces gtests, memcheck of
# the wide-path test, the layer A/B (issue 52's cells: no variable groups there; Qwen3-30B-A3B's dims with 16 / 32
# experts: 16-32 pairs per expert); PART 2: racecheck of the wide-path test.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran|Failure|error" "$1" | head -${2:-14}; }
if [ "${PART:-1}" = 1 ]; then
  timeout 240 /tmp/vg/gt --gtest_filter="${GF:-MoeLayerDecode.*:MoeLayerPieces.*}" > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt 20
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/vg/gt \
    --gtest_filter=MoeLayerDecode.WidePathMatchesTheComposition > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
  shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                       qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                       q16) echo "--experts 16 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                       q32) echo "--experts 32 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
  for cs in "gptoss 16" "gptoss 64" "gptoss 128" "qwen3 16" "qwen3 64" "q16 64" "q16 32" "q32 64" "q32 32"; do
    set -- $cs; line="$1 T$2:"
    for v in m1 vg vg8; do
      b=${v%8}; extra=""; [ $v = vg8 ] && extra="--decode-tokens 8"
      # (16 / 32 experts: the layer's own bound has no wide path there; 64 asks for it)
      [ $v != vg8 ] && [ "${1#q}" != "$1" ] && [ "$1" != qwen3 ] && extra="--decode-tokens 64"
      f=$R/ab_${v}_$1_t$2.txt
      timeout 60 /tmp/$b/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint $extra \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line $(grep -c 'slots of an expert per weight read' $R/ab_vg_$1_t$2.txt)"
  done
  grep -h "wide decode" $R/ab_vg_q16_t64.txt | grep -oE "wide decode path[^;]*" | head -1
  echo "[$((SECONDS - t0)) s]"
fi
if [ "${PART:-1}" = 2 ]; then
  timeout 200 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 /tmp/vg/gt \
    --gtest_filter=MoeLayerDecode.WidePathMatchesTheComposition > $R/racecheck.txt 2>&1
  echo "racecheck rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $R/racecheck.txt | head -3
fi
tar czf $OUT/${NAME:-v}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v99 (session 112; prepared, not run): exp/producer-gather (`../producer_gather.patch`, on main 9ceaee8) -- the
# W4A16 MoE kernel's activation warp gathers the token rows itself (cp.async, 16-byte chunks into the 128-byte
# swizzle) from rows the pre-pass reordered once, instead of the pre-pass writing T x top-k gathered rows -- built on
# the GPU machine beside main and checked / timed against it, in parts that each fit one call on a warm machine:
#   PART=build  main's library + CLI (/tmp/b) and the patched tree's library, CLI and GPU tests (/tmp/bd);
#   PART=tests  the MoE / layer gtests on the patched build, then memcheck and racecheck of the W4A16 MoE tests;
#   PART=ab     CLI `layer` A/B (W4A16 pieces, checkpoint scales, ROUNDS rounds of 100, builds alternating) at
#               the prefill cells, then digests of the layer suite (bf16) and the MoE suite (bf16): bytes must match.
# Logs under $OUT/g<part>.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/g${PART:-build}; mkdir -p $A
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $A/gpu.txt
case ${PART:-build} in
build)
  [ -f /tmp/b/built ] || PHASE=build NAME=g_mainbuild bash bench/results/v95/probe/table.sh 2>&1 | tail -12
  if [ ! -f /tmp/bd/built ]; then
    rm -rf /tmp/dsrc && mkdir -p /tmp/dsrc
    tar cf - --exclude=./bench/results --exclude=./.carry --exclude=./build . | tar xf - -C /tmp/dsrc
    (cd /tmp/dsrc && patch -p1 < $OLDPWD/bench/results/v99/producer_gather.patch) > $A/patch.txt 2>&1 || { cat $A/patch.txt; exit 3; }
    cmake -S /tmp/dsrc -B /tmp/bd -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
      > $A/cmake.txt 2>&1
    s=$SECONDS; ninja -C /tmp/bd > $A/build.txt 2>&1; rc=$?
    echo "patched build rc $rc in $((SECONDS - s)) s [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch /tmp/bd/built || tail -20 $A/build.txt
  fi ;;
tests)
  gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
  timeout ${GTT:-330} /tmp/bd/tests/fp4gemm_gpu_tests \
    --gtest_filter="${GF:-MoeBadGatherW4A16.*:MoeBadRouting*:MoeCombos*:MoeRandom*:MoePieces*:MoeGraph*:MoeStreamK*:MoeLayerPieces.*:All/MoeLayerCases.*:MoeLayerGraph*:MoeGlu*}" > $A/gt.txt 2>&1
  echo "gtests rc $? [$((SECONDS - t0)) s]"; gsum $A/gt.txt
  for tool in memcheck racecheck; do
    timeout ${MCT:-100} compute-sanitizer --tool $tool --report-api-errors no /tmp/bd/tests/fp4gemm_gpu_tests \
      --gtest_filter="${MF:-MoeBadGatherW4A16.*:MoeSanitizer.*:MoeLayerPieces.*}" > $A/$tool.txt 2>&1
    echo "$tool rc $? [$((SECONDS - t0)) s]"; tail -3 $A/$tool.txt
  done ;;
ab)
  shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                       qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai";; esac; }
  declare -A CLI=([m]=/tmp/b/tools/fp4gemm [d]=/tmp/bd/tools/fp4gemm)
  for r in $(seq 1 ${ROUNDS:-2}); do
    IFS=';' read -ra CL <<< "${CELLS:-qwen3 512;qwen3 1024;qwen3 4096;gptoss 512;gptoss 4096;qwen3 128}"
    for cs in "${CL[@]}"; do
      set -- $cs; line="r$r $1 T$2:"
      order="m d"; [ $((r % 2)) = 0 ] && order="d m"
      for v in $order; do
        f=$A/${v}_$1_t$2_r$r.txt
        timeout 90 ${CLI[$v]} layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
          --iters 100 --warmup 10 > $f 2>&1
        line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
      done
      echo "$line [$((SECONDS - t0)) s]"
    done
  done | tee $A/ab.txt
  for s in "layer bf16" "moe bf16"; do
    set -- $s; args="--suite $1 --act $2"; [ $1 = layer ] && args="$args --weight-layout pieces"
    for v in m d; do
      FP4GEMM_DIGEST=1 timeout 150 ${CLI[$v]} bench $args --no-peers > $A/suite_$1_$2_$v.txt 2>&1
      echo "suite $1 $2 $v rc $? [$((SECONDS - t0)) s]"
      grep -i "digest" $A/suite_$1_$2_$v.txt | sed 's/  */ /g' > /tmp/d_$v
    done
    echo "digests $1 $2: $(wc -l < /tmp/d_m) / $(wc -l < /tmp/d_d) lines, differing: $(diff /tmp/d_m /tmp/d_d | grep -c '^<')"
  done | tee $A/digests.txt ;;
esac
gzip -f $A/*.txt 2>/dev/null; tar czf $OUT/g${PART:-build}.tgz -C $OUT g${PART:-build}; echo "done [$((SECONDS - t0)) s]"

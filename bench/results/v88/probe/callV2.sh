#!/usr/bin/env bash
# v88 call V2 (one H200): branch exp/combine8 (main + the wide pre-pass's masks on an odd stride + the wide combine 8
# rows per lane where a run has >= 1024 warps' work; the new gtest MoeLayerDecode.WideCombineBothForms).
# BUNDLE v41: c8/{cli,gt,py} (this build), m1/cli (main f27528e).
# 1: A/B, CLI layer W4A16 pieces, issue 52's wide / decode cells, 2 rounds (m1 / c8).
# 2: the whole C++ GPU tier (4 shards), CLI memcheck / synccheck of the decode path, the Python GPU tier (val.sh), and
#    beside them memcheck of the two wide-path gtests that run both combine forms.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/ab; mkdir -p $A
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
if [ "${AB:-1}" = 1 ]; then
for r in 1 2; do
  for cs in "gptoss 16" "gptoss 64" "gptoss 96" "gptoss 128" "qwen3 16" "qwen3 32" "qwen3 64"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in m1 c8; do
      f=$A/${v}_$1_t$2_r$r.txt
      timeout 60 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line"
  done
done
echo "[$((SECONDS - t0)) s]"
fi
mkdir -p $OUT/mc
( timeout ${MCT:-420} compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/c8/gt \
    --gtest_filter='MoeLayerDecode.WideCombineBothForms:MoeLayerDecode.WidePathMatchesTheComposition' > $OUT/mc/memcheck.txt 2>&1
  echo "memcheck wide rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/mc/memcheck.txt | head -4 ) &
M=c8 NSH=4 SHT=${SHT:-420} PYTESTS="." PYT=${PYT:-420} NAME=v2val bash bench/results/v78/probe/val.sh
wait
tar czf $OUT/v2ab.tgz -C $OUT ab mc && rm -rf $A $OUT/mc; echo "all done [$((SECONDS - t0)) s]"

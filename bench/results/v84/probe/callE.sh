#!/usr/bin/env bash
# v84 call E (one H200, carry .carry/v28: n1 = main + the wide bound past 64 tokens -- CLI and GPU tests): MODE tests:
# the decode / pieces GPU tests (WidePath at T 100 / 128, top-4: 400 / 512 pairs); MODE san: memcheck and racecheck of
# the wide-path tests; MODE time: the layer's default bound (-1) against --decode-tokens 64, gpt-oss-120b T 64 / 96 /
# 128 (W4A16 pieces and rows, W4A4 MXFP4 pieces) and Qwen3-30B-A3B T 64 (the plan's describe line as well).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/${BUNDLE:-v28}/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/${BUNDLE:-v28}/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
M=${M:-n1}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran|Failure|error" "$1" | head -${2:-14}; }
for mode in ${MODES:-tests time}; do
if [ $mode = tests ]; then
  timeout 420 /tmp/$M/gt --gtest_filter="${GF:-MoeLayerDecode.*:MoeLayerPieces.*}" > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt 20; grep -E "^\[       OK \]" $R/gt.txt | sed 's/^/  /' | head -30
fi
if [ $mode = san ]; then
  for tool in memcheck racecheck; do
    timeout ${ST:-270} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 /tmp/$M/gt \
      --gtest_filter="${SANF:-MoeLayerDecode.WidePath*}" > $R/$tool.txt 2>&1
    echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -3
  done
fi
if [ $mode = time ]; then
  g="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"; q="--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu"
  for r in 1 2; do for cs in "g bf16 pieces 64" "g bf16 pieces 96" "g bf16 pieces 128" "g bf16 rows 128" "g mxfp4 pieces 128" "q bf16 pieces 64"; do
    set -- $cs; [ $1 = g ] && sh=$g || sh=$q
    line="r$r $1 $2 $3 T$4:"
    for d in 64 -1; do f=$R/$1_$2_$3_t$4_d${d}_r$r.txt
      /tmp/$M/cli layer $sh --tokens $4 --act $2 --weight-layout $3 --values checkpoint --decode-tokens $d --iters 100 --warmup 10 > $f 2>&1
      line="$line d$d $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line | default: $(grep -o 'wide decode path for T <= [0-9]*' $R/$1_$2_$3_t$4_d-1_r$r.txt)"
  done; done
fi
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-e}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

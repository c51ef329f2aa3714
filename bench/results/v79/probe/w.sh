#!/usr/bin/env bash
# v79 (one H200): the wide decode path (exp/decode-wide) -- its gtests and memcheck, then the layer at T 9..64 with the
# path off / on (FP4GEMM_DECODE_WIDE), W4A16 on pieces, Qwen3-30B-A3B and gpt-oss-120b shapes. BUNDLE: .carry/<tag>
# holding /tmp/<M>/{cli,gt}. MODES: tests, ab (both by default), ab2 (default bound against --decode-tokens 8), ab3 (builds
# VS at the default bound), ab4 (W4A4 ACT: --decode-tokens 8 against 64). TS: the token counts.
# Added in v81 (defaults as before): MODELS (the model rows: qwen3, gptoss), SANF (the sanitizers' gtest filter),
# WL / XARGS (ab4's weight layout and extra CLI arguments, e.g. XARGS="--scales linear"; ACT=bf16 runs W4A16).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-w1}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 FP4GEMM_CLI=/tmp/$M/cli
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran|Failure|error" "$1" | head -${2:-14}; }
for mode in ${MODES:-tests ab}; do
if [ $mode = tests ]; then
  timeout ${GTT:-300} /tmp/$M/gt --gtest_filter="${GF:-MoeLayerDecode.*:MoeLayerPieces.*}" > $R/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $R/gt.txt 20
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/$M/gt \
    --gtest_filter="${SANF:-MoeLayerDecode.WidePath*}" > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
  timeout 200 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 /tmp/$M/gt \
    --gtest_filter="${SANF:-MoeLayerDecode.WidePath*}" > $R/racecheck.txt 2>&1
  echo "racecheck rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $R/racecheck.txt | head -3
fi
if [ $mode = ab ]; then
  for m in "qwen3 128 2048 768 8 silu" "gptoss 128 2880 2880 4 swigluoai"; do set -- $m; case " ${MODELS:-qwen3 gptoss} " in *" $1 "*) ;; *) continue;; esac
    for T in ${TS:-9 16 24 32 48 64}; do for w in 0 64; do for rnd in 1 2; do
      f=$R/${1}_T${T}_w${w}_r$rnd.txt
      if [ $w = 0 ]; then env -u FP4GEMM_DECODE_WIDE timeout 100 /tmp/$M/cli layer --experts $2 --hidden $3 --inter $4 --tokens $T \
          --topk $5 --activation $6 --act bf16 --weight-layout pieces --iters 100 --warmup 10 > $f 2>&1
      else FP4GEMM_DECODE_WIDE=$w timeout 100 /tmp/$M/cli layer --experts $2 --hidden $3 --inter $4 --tokens $T \
          --topk $5 --activation $6 --act bf16 --weight-layout pieces --iters 100 --warmup 10 > $f 2>&1; fi
    done; done
    printf "%-7s T %3s  general %s / %s   wide %s / %s\n" $1 $T \
      "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_w0_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_w0_r2.txt | cut -c7-)" \
      "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_w64_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_w64_r2.txt | cut -c7-)"
    done
  done
  grep -l "wide decode path" $R/*_w64_r1.txt | wc -l | sed 's/^/plans with the wide path: /'
  grep -h -i "error" $R/*.txt | head -5
  echo "ab [$((SECONDS - t0)) s]"
fi
if [ $mode = ab2 ]; then  # the layer's default bound (-1: the wide kernels where it chose them) against the narrow 8
  for m in "qwen3 128 2048 768 8 silu" "gptoss 128 2880 2880 4 swigluoai"; do set -- $m; case " ${MODELS:-qwen3 gptoss} " in *" $1 "*) ;; *) continue;; esac
    for T in ${TS:-1 8 9 16 24 32 64}; do for d in 8 -1; do for rnd in 1 2; do
      timeout 100 /tmp/$M/cli layer --experts $2 --hidden $3 --inter $4 --tokens $T --topk $5 --activation $6 --act bf16 \
        --weight-layout pieces --decode-tokens $d --iters 100 --warmup 10 > $R/${1}_T${T}_d${d}_r$rnd.txt 2>&1
    done; done
    printf "%-7s T %3s  decode_tokens 8: %s / %s   default: %s / %s  %s\n" $1 $T \
      "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_d8_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_d8_r2.txt | cut -c7-)" \
      "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_d-1_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/${1}_T${T}_d-1_r2.txt | cut -c7-)" \
      "$(grep -o 'wide decode path for T <= [0-9]*' $R/${1}_T${T}_d-1_r1.txt)"
    done
  done
  echo "ab2 [$((SECONDS - t0)) s]"
fi
if [ $mode = ab3 ]; then  # builds VS (first: candidate, last: baseline) at the layer's default bound, same call
  VS=(${VS:-w3 w2})
  for m in "qwen3 128 2048 768 8 silu" "gptoss 128 2880 2880 4 swigluoai"; do set -- $m; case " ${MODELS:-qwen3 gptoss} " in *" $1 "*) ;; *) continue;; esac
    for T in ${TS:-9 16 24 32 64}; do for rnd in 1 2; do for v in "${VS[@]}"; do
      timeout 100 /tmp/$v/cli layer --experts $2 --hidden $3 --inter $4 --tokens $T --topk $5 --activation $6 --act bf16 \
        --weight-layout pieces --iters 100 --warmup 10 > $R/${1}_T${T}_${v}_r$rnd.txt 2>&1
    done; done
    line="$(printf '%-7s T %3s' $1 $T)"
    for v in "${VS[@]}"; do line="$line  $v: $(grep -o 'time: [0-9.]*' $R/${1}_T${T}_${v}_r1.txt | cut -c7-) / $(grep -o 'time: [0-9.]*' $R/${1}_T${T}_${v}_r2.txt | cut -c7-)"; done
    echo "$line"
    done
  done
  echo "ab3 [$((SECONDS - t0)) s]"
fi
if [ $mode = ab4 ]; then  # W4A4 (ACT, default nvfp4) on pieces: the narrow bound (--decode-tokens 8) against the wide kernels (64)
  for m in "qwen3 128 2048 768 8 silu" "gptoss 128 2880 2880 4 swigluoai"; do set -- $m; case " ${MODELS:-qwen3 gptoss} " in *" $1 "*) ;; *) continue;; esac
    for T in ${TS:-9 16 24 32 64}; do for d in 8 64; do for rnd in 1 2; do
      timeout 100 /tmp/$M/cli layer --experts $2 --hidden $3 --inter $4 --tokens $T --topk $5 --activation $6 --act ${ACT:-nvfp4} \
        --weight-layout ${WL:-pieces} ${XARGS:-} --decode-tokens $d --iters 100 --warmup 10 > $R/a4_${1}_T${T}_d${d}_r$rnd.txt 2>&1
    done; done
    printf "%-7s T %3s  decode_tokens 8: %s / %s   64: %s / %s  %s\n" $1 $T \
      "$(grep -o 'time: [0-9.]*' $R/a4_${1}_T${T}_d8_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/a4_${1}_T${T}_d8_r2.txt | cut -c7-)" \
      "$(grep -o 'time: [0-9.]*' $R/a4_${1}_T${T}_d64_r1.txt | cut -c7-)" "$(grep -o 'time: [0-9.]*' $R/a4_${1}_T${T}_d64_r2.txt | cut -c7-)" \
      "$(grep -o 'wide decode path for T <= [0-9]*' $R/a4_${1}_T${T}_d64_r1.txt)"
    done
  done
  echo "ab4 [$((SECONDS - t0)) s]"
fi
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-w}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

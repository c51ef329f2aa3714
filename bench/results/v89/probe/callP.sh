#!/usr/bin/env bash
# v89 call P (one H200): per-SASS-instruction executed counts and stall samples of the general GEMM1 and GEMM2 at
# gpt-oss-120b T 512 (c9 = 6efc626's build, main's fused kernels; BUNDLE v42): ncu report with SourceCounters, then the
# source page (SASS) as CSV, to find where the ~29 % of GEMM1's instructions outside the k-loop go.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
for T in 512 4096; do
timeout 200 ncu --clock-control none -k regex:fused_grouped_gemm -c 2 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight --import-source no -o $R/rep_t$T -f \
  /tmp/c9/cli layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --tokens $T --act bf16 \
  --weight-layout pieces --values checkpoint --iters 1 --warmup 0 > $R/ncu_t$T.log 2>&1
echo "ncu T$T rc $? [$((SECONDS - t0)) s]"
for id in 0 1; do
  timeout 120 ncu -i $R/rep_t$T.ncu-rep --page source --csv --print-source sass --launch-skip $id --launch-count 1 > $R/src_t${T}_k$id.csv 2>$R/src_t${T}_k$id.err
  echo "src T$T k$id rc $? $(wc -l < $R/src_t${T}_k$id.csv) lines [$((SECONDS - t0)) s]"
done
[ $(wc -l < $R/src_t${T}_k0.csv) -gt 50 ] || { timeout 180 ncu -i $R/rep_t$T.ncu-rep --page source --csv --print-source sass > $R/src_t${T}_all.csv 2>&1; echo "all rc $? $(wc -l < $R/src_t${T}_all.csv)"; }
timeout 60 ncu -i $R/rep_t$T.ncu-rep --page details --print-details all > $R/details_t$T.txt 2>&1
done
head -c 1500 $R/src_t512_k0.csv; echo; head -3 $R/src_t512_k0.err
tar cf - -C $OUT r | xz -6 -T4 > $OUT/${NAME:-p}.tar.xz && rm -rf $R; ls -la $OUT; echo "done [$((SECONDS - t0)) s]"

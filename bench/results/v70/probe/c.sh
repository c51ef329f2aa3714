#!/usr/bin/env bash
# v70 c (one H200): branch exp/pieces-9op's CLI (.carry/v110c, 74395bc): the layer suites on pieces and rows, all three
# activations, with FP4GEMM_DIGEST (digests must equal v68 d5's / v69 f's), one round.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v110c; mkdir -p $C; xz -dc .carry/v110c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
export FP4GEMM_DIGEST=1
for act in bf16 mxfp4 nvfp4; do for wl in pieces rows; do
  timeout 90 $C/fp4gemm bench --suite layer --act $act --weight-layout $wl --settle-ms 100 --json $R/layer_${act}_${wl}.json > $R/layer_${act}_${wl}.txt 2>&1
  echo "layer $act $wl rc $? [$((SECONDS - t0)) s]"
done; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

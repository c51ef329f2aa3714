#!/usr/bin/env bash
# v67 c2 (one H200; carry .carry/v102c: feat/pieces' CLI, and .carry/v99: main c213566's CLI): digests and times,
#   the layer suite (W4A16, default options: the decode path at T <= 8): main (M), feat rows (A), feat pieces (B);
#   the MoE suite W4A16: feat rows (A) and pieces (B). One round each, interleaved.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102; mkdir -p $V; xz -dc .carry/v102c/bins.tar.xz | tar xf - -C $V; xz -dc .carry/v99/bins.tar.xz | tar xf - -C $V; ls $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R/ab $R/am
export FP4GEMM_DIGEST=1
L() { timeout 100 $1 bench --suite layer --act bf16 $2 --settle-ms 100 --json $3.json > $3.txt 2>&1; echo "$3 [$((SECONDS - t0)) s]"; }
L $V/cli_fixed "" $R/am/layer_A1
L $V/fp4gemm "" $R/am/layer_B1
cp $R/am/layer_B1.json $R/ab/layer_A1.json; cp $R/am/layer_B1.txt $R/ab/layer_A1.txt
L $V/fp4gemm "--weight-layout pieces" $R/ab/layer_B1
for wl in rows pieces; do s=A; [ $wl = pieces ] && s=B
  timeout 120 $V/fp4gemm bench --suite moe --act bf16 --weight-layout $wl --settle-ms 100 --json $R/ab/moe_bf16_${s}1.json > $R/ab/moe_bf16_${s}1.txt 2>&1
  echo "moe $wl [$((SECONDS - t0)) s]"; done
echo "== main (A) vs feat rows (B)"; python3 bench/results/v50/probe/ab_compare.py $R/am 2>&1 | tee $R/am/compare.txt
echo "== feat rows (A) vs pieces (B)"; python3 bench/results/v50/probe/ab_compare.py $R/ab 2>&1 | tee $R/ab/compare.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

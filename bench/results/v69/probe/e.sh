#!/usr/bin/env bash
# v69 e (one H200, one call): how much of issue 52's time is the dequantisation arithmetic? The CLI of branch
# exp/ablate-dequant built with -DFP4GEMM_ABLATE_DEQUANT (.carry/v108a; timing only, WRONG results): the fused k-loop
# and the decode chunk take the packed words as operands, no e2m1 conversion, no scale multiply. Compare with
# main's CLI in v69 b (the same `moe` runs) and v68 d5 (the same layer suites, pieces = B).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v108a; mkdir -p $C; xz -dc .carry/v108a/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
for job in g1:5760:2880:4 g2:2880:2880:4 q1:1536:2048:8 q2:2048:768:8; do for T in 64 512; do
  IFS=: read nm n k tk <<< "$job"
  for wl in rows pieces; do
    f=$R/moe_${nm}_T${T}_$wl.txt
    timeout 60 $C/fp4gemm moe --experts 128 --n $n --k $k --tokens $T --topk $tk --act bf16 --weight-layout $wl > $f 2>&1
    echo "T$T $nm $wl $(grep -oE 'time: [0-9.]+ us \(median of [0-9]+, min [0-9.]+\)' $f | sed 's/median of [0-9]*, //') $(grep -oE '[0-9.]+ TB/s' $f)"
  done
done; done; echo "[moe done $((SECONDS - t0)) s]"
for act in bf16 nvfp4; do
  [ $((SECONDS - t0)) -gt 200 ] && break
  timeout 110 $C/fp4gemm bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_abl.json > $R/layer_${act}_abl.txt 2>&1
  echo "layer $act rc $? [$((SECONDS - t0)) s]"
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

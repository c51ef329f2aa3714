#!/usr/bin/env bash
# v112 call TR (whichever GPU comes; no build there): the per-CTA trace (cycles: consumer loop and `full` waits per
# k-block, producer `empty` waits and issue per k-block, epilogue, busy max / avg) of the layer's GEMMs as MoE GEMMs
# (CLI `moe`, W4A16 pieces, checkpoint scales, uniform top-k routing), trace build of main (tb_cli) beside main's plain
# CLI for the same commands. Carry .carry/main_cli.tar.xz, .carry/tb_cli.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/tr; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
mkdir -p /tmp/xm /tmp/xt && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm && \
  xz -dc .carry/tb_cli.tar.xz | tar xf - -C /tmp/xt || { echo "unpack failed"; exit 3; }
run() {  # name, then the shape's arguments
  local n=$1; shift
  for b in xm xt; do
    timeout 120 /tmp/$b/tools/fp4gemm moe --act bf16 --weight-layout pieces --values checkpoint --iters 50 "$@" \
      > $W/${n}_$b.txt 2>&1; echo "$n $b rc $? [$((SECONDS - t0)) s]"
  done
  grep -E "median|busy cycles" $W/${n}_xm.txt $W/${n}_xt.txt | head -4
}
run q512_g2 --experts 128 --n 2048 --k 768 --tokens 512 --topk 8
run q512_g1 --experts 128 --n 1536 --k 2048 --tokens 512 --topk 8
run o512_g2 --experts 128 --n 2880 --k 2880 --tokens 512 --topk 4
run o512_g1 --experts 128 --n 5760 --k 2880 --tokens 512 --topk 4
run q4096_g2 --experts 128 --n 2048 --k 768 --tokens 4096 --topk 8
run q4096_g1 --experts 128 --n 1536 --k 2048 --tokens 4096 --topk 8
run q256_g2 --experts 128 --n 2048 --k 768 --tokens 256 --topk 8
tar czf $OUT/cTR.tgz -C $OUT tr && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"

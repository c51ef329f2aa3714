#!/usr/bin/env bash
# v64 c0 (one H200): (1) issue 51's last cell split by width class: the MoE GEMM of mixtral's down projection
# (E 8, N 4096, K 14336, top-2) with balanced routing, R rows per expert (one token tile per expert up to 256 rows,
# two past it), A = 399676a's CLI against main's, W4A16 and W4A4 NVFP4, 2 interleaved rounds; the uniform cell
# beside it. (2) main's C++ GPU tier (4 shards) and compute-sanitizer (scripts/device_carried.sh gpu sanitize).
# Carry .carry/v84 (one solid xz: main's build laid out by scripts/carry_build.sh, plus cli_old).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v84; mkdir -p $V
xz -dc .carry/v84/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
echo "unpacked [$((SECONDS - t0)) s]"
mkdir -p $OUT/sweep
for rnd in 1 2; do
  for R in 128 144 152 160 192 224 240 256 272 296 U; do
    for act in bf16 nvfp4; do
      for side in A M; do
        bin=$V/cli_old; [ $side = M ] && bin=.carry/build/tools/fp4gemm
        if [ $R = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * R)) --routing balanced"; fi
        t=$(timeout 60 $bin moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
        echo "$rnd $R $act $side $t"
      done
    done
  done
done | tee $OUT/sweep/sweep.txt
echo "sweep [$((SECONDS - t0)) s]"
SHARDS=4 FP4GEMM_BUILD_DIR=/work/main-build OUT=$OUT/dc timeout $((580 - SECONDS + t0)) bash scripts/device_carried.sh gpu sanitize 2>&1 | tail -30
echo "done [$((SECONDS - t0)) s]"

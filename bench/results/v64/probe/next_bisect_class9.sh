#!/usr/bin/env bash
# Prepared for the next session (issue 51's last cell; not run): which commit between 399676a and main made the MoE
# kernel's 136-160-token classes 1-2.5 % slower (v64 c0 / c3: mixtral down with balanced routing, R 272 rows per
# expert = class 9 only, M/A 1.015-1.026; the descriptor reduction is not it -- c3's old descriptor form was slower
# still). Builds the CLI at each commit ON THE GPU MACHINE (16 cores; 2 builds at a time, ~2-3 min each when the
# fused kernels are split into units, longer before 7bfe65c) and times R 272 / R 256 / the uniform T 1024 cell, W4A16,
# 3 interleaved rounds. Make the sources first, here:
#   for c in 399676a 3718878 7bfe65c acd61ac 1b9f495 ff49dc1 aefe22d 6c00fea 60fa354 4ae0023 b848b3a; do
#     mkdir -p .carry/bisect && git archive --format=tar $c CMakeLists.txt cmake include src tools | xz -T2 > .carry/bisect/$c.tar.xz; done
# then run with carry [".carry/bisect"]; results under $OUT/r (times.txt: round cell commit us). The builds take more
# than one call's 10 minutes: call it again at once (a warm machine keeps /tmp/bis; built commits are skipped), and
# read times.txt of the call that had every commit built.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
commits=""  # in history order (the first is 399676a, the last main)
for c in 399676a 3718878 7bfe65c acd61ac 1b9f495 ff49dc1 aefe22d 6c00fea 60fa354 4ae0023 b848b3a; do
  [ -f .carry/bisect/$c.tar.xz ] && commits="$commits $c"; done
build() {  # $1 = commit, $2 = extra CMake options (a trace build: -DFP4GEMM_TRACE=ON), $3 = folder suffix
  local d=/tmp/bis/$1$3
  [ -x $d/b/tools/fp4gemm ] && { echo "have $1$3"; return 0; }  # (an earlier call on this warm machine built it)
  mkdir -p $d/src && xz -dc .carry/bisect/$1.tar.xz | tar xf - -C $d/src
  cmake -S $d/src -B $d/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TOOLS=ON -DFP4GEMM_BUILD_TESTS=OFF \
    -DFP4GEMM_BUILD_PYTHON=OFF $2 > $R/cmake_$1$3.log 2>&1 && ninja -C $d/b -j8 fp4gemm_cli > $R/build_$1$3.log 2>&1
  echo "built $1$3 rc=$? [$((SECONDS - t0)) s]"
}
# First the trace builds of both ends (per-CTA cycle counters: mainloop, barrier waits, epilogue; the CLI prints them):
# which phase of a class-9 tile grew tells where to look even before the bisect narrows the commit.
first=$(echo $commits | awk '{print $1}'); last=$(echo $commits | awk '{print $NF}')
build $first -DFP4GEMM_TRACE=ON _trace & build $last -DFP4GEMM_TRACE=ON _trace & wait
for c in ${first}_trace ${last}_trace; do
  bin=$(find /tmp/bis/$c/b -name fp4gemm -type f -perm -u+x 2>/dev/null | head -1); [ -z "$bin" ] && continue
  timeout 60 $bin moe --experts 8 --n 4096 --k 14336 --topk 2 --tokens 1088 --routing balanced --act bf16 --scales linear \
    --out f16 --values full --iters 20 > $R/trace_$c.txt 2>&1; done
set -- $commits
while [ $# -gt 0 ]; do
  build $1 & [ $# -gt 1 ] && build $2 & wait; shift; [ $# -gt 0 ] && shift
  [ $((SECONDS - t0)) -gt 420 ] && { echo "build budget spent"; break; }
done
for rnd in 1 2 3; do for cell in 272 256 U; do for c in $commits; do
  bin=$(find /tmp/bis/$c/b -name fp4gemm -type f -perm -u+x 2>/dev/null | head -1); [ -z "$bin" ] && continue
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * cell)) --routing balanced"; fi
  t=$(timeout 60 $bin moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act bf16 --scales linear --out f16 --values full \
      --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
  echo "$rnd $cell $c $t"
done; done; done | tee $R/times.txt
echo "done [$((SECONDS - t0)) s]"

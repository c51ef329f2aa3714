#!/usr/bin/env bash
# v65 c0 (one H200): (1) main e315b7f's C++ GPU tier (4 shards) and compute-sanitizer (scripts/device_carried.sh gpu
# sanitize), binaries built on the CPU machine and carried (.carry/build, .carry/pkg); (2) meanwhile, on the CPU cores,
# trace builds (-DFP4GEMM_TRACE=ON: per-CTA cycle counters) of the CLI at 399676a and b848b3a (.carry/bisect tarballs),
# then class 9 alone (mixtral down, R 272 rows per expert, balanced) and the uniform T 1024 cell on each: which phase of
# the 136-160-token tiles grew between them (issue 51's last cell).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/trace; mkdir -p $R
build() {  # $1 = commit
  local d=/tmp/bis/$1_trace
  mkdir -p $d/src && xz -dc .carry/bisect/$1.tar.xz | tar xf - -C $d/src
  cmake -S $d/src -B $d/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TOOLS=ON -DFP4GEMM_BUILD_TESTS=OFF \
    -DFP4GEMM_BUILD_PYTHON=OFF -DFP4GEMM_TRACE=ON > $R/cmake_$1.log 2>&1 && timeout 480 ninja -C $d/b -j6 fp4gemm_cli > $R/build_$1.log 2>&1
  echo "built $1 rc=$? [$((SECONDS - t0)) s]"
}
build 399676a & build b848b3a &
SHARDS=4 FP4GEMM_BUILD_DIR=/work/main-build OUT=$OUT/dc timeout 400 bash scripts/device_carried.sh gpu sanitize 2>&1 | tail -30
echo "checks [$((SECONDS - t0)) s]"
wait
for c in 399676a b848b3a; do
  bin=/tmp/bis/${c}_trace/b/tools/fp4gemm; [ -x $bin ] || { echo "no trace build $c"; continue; }
  for args in "--tokens 1088 --routing balanced" "--tokens 1024 --routing uniform"; do
    echo "== $c $args" >> $R/trace_$c.txt
    timeout 60 $bin moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act bf16 --scales linear --out f16 --values full \
      --iters 20 >> $R/trace_$c.txt 2>&1
  done
done
head -c 3000 $R/trace_b848b3a.txt
(cd $OUT && tar czf trace.tgz trace && rm -rf trace)
echo "done [$((SECONDS - t0)) s]"

#!/bin/bash
# A/B of the MoE CLI in one device call: .ab/old (a `git archive <base>` of the baseline, carried) vs the
# working tree, built side by side, (a) and (c) alternating. Usage on the device: bash scripts/ab_moe.sh
set -u
(cmake -S .ab/old -B .ab/bold -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF >/dev/null 2>&1 && cmake --build .ab/bold -j 8 --target fp4gemm_cli >/dev/null 2>&1; echo "old build rc=$?") &
(cmake -S . -B build/ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF >/dev/null 2>&1 && cmake --build build/ab -j 8 --target fp4gemm_cli >/dev/null 2>&1; echo "new build rc=$?") &
wait
ls .ab/bold/tools/fp4gemm build/ab/tools/fp4gemm
for round in 1 2; do
  for v in old new; do
    bin=$([ $v = old ] && echo .ab/bold/tools/fp4gemm || echo build/ab/tools/fp4gemm)
    a=$($bin moe --experts 32 --n 4096 --k 7168 --tokens 36 --topk 8 --act nvfp4 2>&1 | grep -o "time: [0-9.]*")
    c=$($bin moe --experts 256 --n 2048 --k 7168 --tokens 256 --topk 8 --act nvfp4 2>&1 | grep -o "time: [0-9.]*")
    echo "round $round $v: (a) $a (c) $c"
  done
done

set -uo pipefail
D=/tmp/dev; mkdir -p $D
( OUT=$D scripts/device_check.sh build ) > $OUT/check.txt 2>&1
( cmake -S . -B build/ablate -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-DFP4GEMM_ABLATE_DEQUANT > /dev/null && cmake --build build/ablate -j 8 --target fp4gemm_cli > $D/ablate_build.log 2>&1; echo "ablate build rc=$?" ) > $D/ablate_status.txt 2>&1 &
OUT=$D scripts/device_check.sh test sass >> $OUT/check.txt 2>&1
wait
cat $D/ablate_status.txt >> $OUT/check.txt
OUT=$D timeout 200 scripts/device_check.sh sanitize >> $OUT/check.txt 2>&1
ITERS=50 scripts/ab.sh base FP4GEMM_NO_PDL=1 FP4GEMM_CONVERT_SCALES=1 > $OUT/ab.txt 2>&1
LAYOUT=blocked ITERS=50 scripts/ab.sh base >> $OUT/ab.txt 2>&1
BIN=build/ablate/tools/fp4gemm LAYOUT=blocked ITERS=50 scripts/ab.sh base >> $OUT/ab.txt 2>&1
scripts/ncu_source.sh $OUT/source_case1.csv >> $OUT/check.txt 2>&1
timeout 150 bash scripts/ncu_profile.sh > $OUT/ncu.txt 2>&1
grep -E "FAILED|Failure" -A5 $D/gpu_tests.log | head -60 > $OUT/test_failures.txt

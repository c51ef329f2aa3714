set -uo pipefail
D=/tmp/dev; mkdir -p $D
cmake -S . -B build/v232 -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=-DFP4GEMM_PRODUCER_REGS=40 -DFP4GEMM_CONSUMER_REGS=232" > /dev/null 2>&1
( cmake --build build/v232 -j 8 --target fp4gemm_cli > $D/v232.log 2>&1; echo "v232 build rc=$?" >> $OUT/check.txt ) &
( OUT=$D scripts/device_check.sh build sass ) > $OUT/check.txt 2>&1
wait
grep -E "spill" $D/v232.log | sort | uniq -c >> $OUT/check.txt
( GTEST_FILTER='FusedCluster.*:FusedSanitizer.*' TEST_TIMEOUT=200 OUT=$D scripts/device_check.sh test ) >> $OUT/check.txt 2>&1
ITERS=30 scripts/ab.sh base FP4GEMM_CLUSTER=1 > $OUT/ab.txt 2>&1
BIN=build/v232/tools/fp4gemm ITERS=30 scripts/ab.sh base FP4GEMM_CLUSTER=1 | sed 's/^/v232 /' >> $OUT/ab.txt 2>&1
timeout 120 bash scripts/ncu_profile.sh > $OUT/ncu.txt 2>&1

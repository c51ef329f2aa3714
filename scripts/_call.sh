set -uo pipefail
D=/tmp/dev; mkdir -p $D
( OUT=$D scripts/device_check.sh build sass ) > $OUT/check.txt 2>&1
( GTEST_FILTER='FusedCluster.*:FusedSanitizer.*:FusedSeedShapes.*' TEST_TIMEOUT=200 OUT=$D scripts/device_check.sh test ) >> $OUT/check.txt 2>&1
cp $D/gpu_tests.log $OUT/gpu_tests_quick.log
ITERS=50 scripts/ab.sh base FP4GEMM_CLUSTER=1 > $OUT/ab.txt 2>&1
LAYOUT=blocked ITERS=50 scripts/ab.sh base >> $OUT/ab.txt 2>&1
timeout 120 bash scripts/ncu_profile.sh > $OUT/ncu.txt 2>&1

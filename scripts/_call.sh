set -uo pipefail
D=/tmp/dev; mkdir -p $D
( OUT=$D scripts/device_check.sh build sass test sanitize ) > $OUT/check.txt 2>&1
grep -E "FAILED|Failure" -A6 $D/gpu_tests.log | head -40 >> $OUT/check.txt
B=build/device/tools/fp4gemm
$B bench --suite all --json $OUT/v5_h200_linear.json > $OUT/bench.txt 2>&1
$B bench --suite all --layout blocked --json $OUT/v5_h200_blocked.json >> $OUT/bench.txt 2>&1

#!/usr/bin/env bash
# v113 call N (whichever GPU comes; no build there): the MoE schedule's rounds search (n) against main (m).
# 1. bench/micro/moe_schedule_cost.cu, main's schedule (base) and n's (new), 2 runs each: cycles per step + digests.
# 2. v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests), ROUNDS rounds (default 3) of 100,
#    alternating m / n.
# 3. n's C++ GPU tier (3 shards), memcheck (device_carried.sh's filter + the pieces tests), racecheck / synccheck on
#    two MoE tests. Carry .carry/ms, .carry/main_cli.tar.xz, .carry/nw_build.tar.xz (n's tests and CLI; build
#    folder /work/mb) with trim.sh out.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab $OUT/m; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
for r in 1 2; do for b in base new; do .carry/ms/$b 20 > $OUT/m/${b}_r$r.txt 2>&1; echo "micro $b r$r rc $?"; done; done
python3 - $OUT/m <<'PY'
import sys, re
d = sys.argv[1]
def load(f):
    out = {}
    for l in open(f):
        m = re.match(r"^(\S+)\s+(\d+)\s+(\d+)\s+\d+\s+\d+ \|\s+([\d ]+)\|\s+([\d ]+)\|\s+(\w+)", l)
        if m: out[(m[1], int(m[2]), int(m[3]))] = ([int(x) for x in m[4].split()], [int(x) for x in m[5].split()], m[6])
    return out
b, n = load(f"{d}/base_r2.txt"), load(f"{d}/new_r2.txt")
print("micro (run 2), cycles mean to the end of step 3 / step 4 (work known), base -> new; digests")
for k in b:
    print(f"  {k[0]:8s} T {k[1]:5d} GEMM{k[2]}: {b[k][0][2]:6d} -> {n[k][0][2]:6d} | {b[k][0][3]:6d} -> {n[k][0][3]:6d} (max {b[k][1][3]} -> {n[k][1][3]}) | {'same' if b[k][2] == n[k][2] else 'DIFFER'}")
PY
mkdir -p .carry/build /tmp/ab/m /tmp/ab/n /tmp/xm && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm && \
  xz -dc .carry/nw_build.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
ln -sf /tmp/xm/tools/fp4gemm /tmp/ab/m/fp4gemm; ln -sf $PWD/.carry/build/tools/fp4gemm /tmp/ab/n/fp4gemm
echo "unpacked [$((SECONDS - t0)) s]"
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m n | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/cN_ab.tgz -C $OUT w && rm -rf $W
[ -n "${NO_TESTS:-}" ] && exit 0
FP4GEMM_BUILD_DIR=/work/mb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoePieces*:MoeLayerPieces*'
timeout ${ST:-120} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
for tool in racecheck synccheck; do
  [ $((SECONDS - t0)) -gt 540 ] && break
  timeout ${RT:-30} compute-sanitizer --tool $tool --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
    --gtest_filter='MoeGluShapes.StreamKSplitTiles:*MoeLayerCases.*/case0' > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $OUT/sanitizer_$tool.log | head -6
done
echo "all done [$((SECONDS - t0)) s]"

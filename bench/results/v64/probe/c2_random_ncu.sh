#!/usr/bin/env bash
# v64 c2 (one H200): (1) ncu of issue 51's last cell and its width classes, A = 399676a / M = main b848b3a: per-SM
# active cycles, L2 and tensor-pipe throughput (mixtral down, W4A16: uniform T 1024; balanced R 272 = class 9 only;
# R 256 = class 16 only); (2) main's owed checks: the randomized GPU tier (scripts/device_carried.sh random) and the
# Python GPU tier. Carry .carry/v86 (main's build laid out by scripts/carry_build.sh, plus cli_old).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v86; mkdir -p $V
xz -dc .carry/v86/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
mkdir -p $OUT/ncu
M=sm__cycles_active.avg,sm__cycles_active.max,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_bytes.sum.per_second,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum.per_second,smsp__inst_executed.sum
for cell in U 272 256; do for side in A M; do
  bin=$V/cli_old; [ $side = M ] && bin=.carry/build/tools/fp4gemm
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * cell)) --routing balanced"; fi
  timeout 120 ncu --clock-control none -k regex:fused_grouped_gemm --metrics $M $bin moe --experts 8 --n 4096 --k 14336 --topk 2 $args \
    --act bf16 --scales linear --out f16 --values full --iters 2 --warmup 0 > $OUT/ncu/${cell}_$side.txt 2>&1
  echo "== $cell $side"; grep -E "^time|sm__|lts__|l1tex__|dram__|gpu__time|smsp__" $OUT/ncu/${cell}_$side.txt | tail -11
done; done
echo "ncu [$((SECONDS - t0)) s]"
RANDOM_SECONDS=200 RANDOM_LONG=4000 OUT=$OUT/dc timeout 300 bash scripts/device_carried.sh random 2>&1 | tail -8
echo "random [$((SECONDS - t0)) s]"
PYTHONPATH=$PWD/.carry/pkg timeout $((590 - SECONDS + t0)) python3 -m pytest tests/python -q -rs -p no:cacheprovider > $OUT/py_tests.log 2>&1; echo "python rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/py_tests.log | tail -8
echo "done [$((SECONDS - t0)) s]"; cd $OUT && tar czf r.tgz --exclude=r.tgz ncu dc py_tests.log 2>/dev/null

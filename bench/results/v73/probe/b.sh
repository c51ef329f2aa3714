#!/usr/bin/env bash
# v73 b (one H200): the decode cells (T 1, 8 of the layer suite's four models: cases 1,2,8,9,15,16,22,23) on pieces,
# W4A16 and NVFP4 W4A4, for four CLIs (.carry/s: m = main, b = exp/decode-ring, s4 / s5 = the branch with 4 / 5 ring
# stages), alternating, 2 rounds, digests; then ncu of the branch's two decode kernels at gpt-oss W4A16 T 8 on pieces.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/s; mkdir -p $B; [ -f $B/done ] || { xz -dc .carry/s/b.tar.xz | tar xf - -C $B; touch $B/done; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
export FP4GEMM_DIGEST=1
CASES=${CASES:-1,2,8,9,15,16,22,23}
for rnd in 1 2; do for act in bf16 nvfp4; do for v in ${VARIANTS:-b m s4 s5}; do
  timeout 60 $B/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --cases $CASES --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
  echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
for v in b s4 s5; do echo "== $v against m"; python3 bench/results/v73/probe/ratios.py $R $v m; done
for act in bf16 nvfp4; do for v in b m s4 s5; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  for v in b s4 s5; do cmp -s $R/dig_${act}_$v.txt $R/dig_${act}_m.txt && echo "$act $v digests equal ($(wc -l < $R/dig_${act}_$v.txt))" || echo "$act $v digests DIFFER"; done; done
if [ -n "${NCU:-1}" ]; then
  for T in 8 1; do
  timeout 150 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section SourceCounters \
    $B/b/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
    --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_T$T.txt 2>&1
  echo "ncu T $T rc $? [$((SECONDS - t0)) s]"
  grep -E "decode_|Duration|DRAM Throughput|Memory Throughput|Issued Ipc|Eligible Warps|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|L2 Hit|Registers Per" $R/ncu_T$T.txt | head -40
  done
fi
gzip -f $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

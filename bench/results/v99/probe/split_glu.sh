#!/usr/bin/env bash
# v99 (session 112): is GEMM1's GLU epilogue worth moving out of the GEMM? On main as checked out (built on the machine
# by v95's table.sh PHASE=build into /tmp/b): the plain MoE GEMM (CLI `moe`, no GLU) at GEMM1's shape (N = 2 I,
# W4A16 pieces, checkpoint scales, uniform routing) storing bf16 (the no-epilogue bound) against f32 (what a split
# would store: the FP32 gate / up pairs), beside the layer (CLI `layer`) at the same T; and torch's elementwise pass
# with the split's traffic (read the FP32 pairs, write bf16 products) as the separate activation kernel's bound.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/split; mkdir -p $A
PHASE=build NAME=build bash bench/results/v95/probe/table.sh 2>&1 | tail -3
CLI=/tmp/b/tools/fp4gemm
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader | tee $A/gpu.txt
for rnd in 1 2; do
for shape in "gpt-oss-120b 128 2880 2880 4" "qwen3-30b-a3b 128 2048 768 8"; do
  set -- $shape; m=$1 E=$2 H=$3 I=$4 k=$5 N=$((2 * $4)) K=$3
  for T in 512 4096; do
    for out in bf16 f32; do
      timeout 60 $CLI moe --experts $E --n $N --k $K --tokens $T --topk $k --act bf16 --weight-layout pieces \
        --values checkpoint --out $out --iters 100 > $A/moe_${m}_T${T}_${out}_r$rnd.txt 2>&1
      echo "r$rnd $m T $T plain GEMM1 shape -> $out: $(grep -m1 '^time:' $A/moe_${m}_T${T}_${out}_r$rnd.txt)"
    done
    timeout 60 $CLI layer --experts $E --hidden $H --inter $I --topk $k --activation swigluoai --tokens $T --act bf16 --weight-layout pieces --values checkpoint --iters 100 \
      > $A/layer_${m}_T${T}_r$rnd.txt 2>&1
    echo "r$rnd $m T $T layer: $(grep -m1 -i 'time' $A/layer_${m}_T${T}_r$rnd.txt)"
  done
done
done
# per-kernel durations (ncu, clocks not locked) of one layer run and one plain run of each output type, T 4096 and 512
for shape in "gpt-oss-120b 128 2880 2880 4" "qwen3-30b-a3b 128 2048 768 8"; do
  set -- $shape; m=$1 E=$2 H=$3 I=$4 k=$5 N=$((2 * $4)) K=$3
  for T in 512 4096; do
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum $CLI layer --experts $E --hidden $H --inter $I \
      --topk $k --activation swigluoai --tokens $T --act bf16 --weight-layout pieces --values checkpoint --iters 1 \
      --warmup 0 > $A/ncu_layer_${m}_T$T.txt 2>&1
    for out in bf16 f32; do
      timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum $CLI moe --experts $E --n $N --k $K --tokens $T \
        --topk $k --act bf16 --weight-layout pieces --values checkpoint --out $out --iters 1 --warmup 0 \
        > $A/ncu_moe_${m}_T${T}_$out.txt 2>&1
    done
    echo "== $m T $T (ncu, us): layer / plain bf16 / plain f32"
    for f in $A/ncu_layer_${m}_T$T.txt $A/ncu_moe_${m}_T${T}_bf16.txt $A/ncu_moe_${m}_T${T}_f32.txt; do
      python3 -c "
import re, sys
name = None; out = []
for line in open(sys.argv[1], errors='replace'):
    m = re.match(r'^  (\S.*?) \(\d+, \d+, \d+\)x\(', line)
    if m: name = m.group(1).replace('void ', '').split('<')[0].split('(')[0].split('::')[-1]
    m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', line)
    if m and name:
        v = float(m.group(2).replace(',', '')); v = v / 1000 if m.group(1) == 'nsecond' else v * 1000 if m.group(1) == 'msecond' else v
        out.append(f'{name}: {v:.1f}')
print(sys.argv[1].rsplit('/', 1)[1] + ': ' + ' | '.join(out[-8:]))
" $f
    done
  done
done
python3 - <<'PY' 2>&1 | tee $A/torch_elementwise.txt
import torch
for name, rows, i in (("gpt-oss-120b T 4096", 16384, 2880), ("gpt-oss-120b T 512", 2048, 2880),
                      ("qwen3-30b-a3b T 4096", 32768, 768), ("qwen3-30b-a3b T 512", 4096, 768)):
    x = torch.randn(rows, i, 2, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    ts = []
    for r in range(30):
        flush.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); y = (x[..., 0] * x[..., 1]).to(torch.bfloat16); e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    ts.sort()
    mb = rows * i * (8 + 2) / 1e6
    print(f"{name}: read {rows * i * 8 / 1e6:.0f} MB f32 pairs, write {rows * i * 2 / 1e6:.0f} MB bf16: median {ts[15]:.1f} us ({mb / ts[15]:.2f} TB/s)")
PY
tar czf $OUT/split.tgz -C $OUT split; echo "split done [$((SECONDS - t0)) s]"

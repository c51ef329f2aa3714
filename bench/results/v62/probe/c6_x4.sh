#!/usr/bin/env bash
# v62 c6 (nvidia-h200-x4, the first 4-GPU machine lent since v42; ~4 min): issue 50's 4-GPU cells with v51's
# token-once exchange and the combine kernel, on main 3715eae's package (carry .carry/pkg, scripts/carry_build.sh).
#   1. tests/python/test_ep_torch.py with 4 GPUs visible (its 2- and 4-GPU NCCL tests run)
#   2. examples/ep_moe.py on 4 GPUs: W4A4 / W4A16 x T 128 / 4096 per rank, 100 graph-replayed steps, each checked
#      (target: EP step <= 0.35 of the one-GPU layer; v42: 0.31 / 0.34 / 0.36 / 0.36)
#   3. if time is left: the same on 2 GPUs (v51/v52: 0.54-0.59)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R; t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
nvidia-smi topo -m > $R/topo.txt 2>&1
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_ep_torch.py > $R/py_ep_torch.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed|SKIPPED" $R/py_ep_torch.log | tail -6
tar czf $OUT/r.tgz -C $OUT r
for w in 4 2; do
  for cfg in bf16:4096 nvfp4:4096 bf16:128 nvfp4:128; do
    act=${cfg%%:*}; t=${cfg##*:}; f=$R/ep${w}_${act}_${t}
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 90 torchrun --nproc-per-node $w examples/ep_moe.py --act $act \
      --tokens $t --steps 100 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
    echo "== $w GPUs $act T $t ($((SECONDS - t0)) s)"; grep -E "^rank [0-9]+/|^one GPU|Error" $f.log | cut -c1-260 | head -6
    grep -h "^rank [0-9]*:" $f.log | sort | uniq -c | head -4
    tar czf $OUT/r.tgz -C $OUT r
  done
done

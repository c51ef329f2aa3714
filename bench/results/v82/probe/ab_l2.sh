#!/usr/bin/env bash
# v82: the decode kernels' L2 cache policy A/B -- VS binaries (/tmp/<v>/cli) alternated per case, ROUNDS rounds, CLI
# `layer` (W4A16 on pieces, checkpoint-like scales, L2 flushed, graph replay, median of 100); then ncu's DRAM bytes per
# decode kernel for each binary at NCUCASES.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
VS=${VS:-"p0 p1 p2"}; ROUNDS=${ROUNDS:-2}; ACT=${ACT:-bf16}; WL=${WL:-pieces}; XARGS=${XARGS:-}
CASES=${CASES:-"gptoss 1;gptoss 4;gptoss 8;gptoss 16;gptoss 32;gptoss 64;qwen3 1;qwen3 8;qwen3 16;qwen3 32;qwen3 64"}
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     mixtral) echo "--experts 8 --hidden 4096 --inter 14336 --topk 2 --activation silu";; esac; }
IFS=';' read -ra CS <<< "$CASES"
for r in $(seq 1 $ROUNDS); do
  for cs in "${CS[@]}"; do set -- $cs
    line="r$r $1 T$2:"
    for v in $VS; do
      /tmp/$v/cli layer $(shape $1) --tokens $2 --act $ACT --weight-layout $WL --values checkpoint $XARGS --iters 100 --warmup 10 \
        --json $R/${v}_$1_t$2_r$r.json > $R/${v}_$1_t$2_r$r.txt 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $R/${v}_$1_t$2_r$r.txt | cut -d' ' -f2)"
    done
    echo "$line"
  done
done
echo "[$((SECONDS - t0)) s]"
NCUCASES=${NCUCASES:-"gptoss 8;gptoss 64;qwen3 64"}
IFS=';' read -ra NS <<< "$NCUCASES"
for cs in "${NS[@]}"; do set -- $cs; [ -z "${1:-}" ] && continue
  for v in $VS; do
    f=$R/ncu_${v}_$1_t$2.txt
    timeout 120 ncu --clock-control none --cache-control all --print-kernel-base function -k regex:"decode" -s 4 -c 8 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct \
      /tmp/$v/cli layer $(shape $1) --tokens $2 --act $ACT --weight-layout $WL --values checkpoint $XARGS --iters 6 --warmup 4 > $f 2>&1
    echo "ncu $v $1 T$2: $(grep -E '^  [a-z_]+\(|^  [a-z_]+ |gpu__time|dram__bytes|lts__t_sector' $f | sed 's/  */ /g' | head -24 | tr '\n' '|')"
  done
done
tar czf $OUT/${NAME:-ab_l2}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

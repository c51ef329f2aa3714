#!/usr/bin/env bash
# v99 (session 112): issue 52's table on today's main, one call on a fresh machine (carry .carry/peers): v96's call5
# (main built there by CMake, this card's copy rate, triton_kernels' layer and fp4gemm's in the same process, two
# sustained rounds of 100 and a burst of 20, summarised by bench/issue52_rounds.py), then the issue's cells through
# the CLI's layer suite, W4A16 (checkpoint-range scales) and W4A4 NVFP4, pieces, two rounds alternating.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
bash bench/results/v96/probe/call5.sh 2>&1 | grep -v "^\[" | tail -40
C=10,11,17,18,16,19,20,26,27,25  # Qwen3-30B-A3B then gpt-oss-120b, T 1 / 8 / 64 / 512 / 4096
mkdir -p $OUT/cli
for rnd in 1 2; do
  for act in bf16 nvfp4; do
    extra=""; [ $act = bf16 ] && extra="--values checkpoint"
    timeout 120 /tmp/b/tools/fp4gemm bench --suite layer --act $act --weight-layout pieces $extra --cases $C --iters 100 \
      --json $OUT/cli/layer_${act}_r$rnd.json > $OUT/cli/layer_${act}_r$rnd.txt 2>&1
    echo "cli layer $act round $rnd rc $? [$((SECONDS - t0)) s]"
  done
done
python3 - "$OUT/cli" <<'PY'
import json, sys, glob
d = sys.argv[1]
for act in ("bf16", "nvfp4"):
    rows = {}
    for f in sorted(glob.glob(f"{d}/layer_{act}_r*.json")):
        for c in json.load(open(f))["cases"]:
            rows.setdefault((c["model"], c["tokens"]), []).append(c["time_us"]["median"])
    print(f"CLI layer {act} (pieces), median per round, us")
    for (m, t), v in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        print(f"  {m:16s} T {t:5d}: " + " / ".join(f"{x:.1f}" for x in v))
PY
tar czf $OUT/cli.tgz -C $OUT cli; echo "table done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v102: the A/B of two CLIs on the layer suite, shared by call3.sh and call6.sh. Usage:
#   ab_layer.sh BASE NEW CASES OUTDIR
# /tmp/ab/BASE/fp4gemm and /tmp/ab/NEW/fp4gemm, alternating (BASE first), ROUNDS rounds (default 2) of
# `fp4gemm bench --suite layer`, activations ACT (default bf16: W4A16, with checkpoint-range weight scales; nvfp4 /
# mxfp4: W4A4) on pieces, 100 reps, FP4GEMM_DIGEST on; then a
# table of the medians per round, NEW / BASE of the means, and whether the output digests agree (OUTDIR/ab.txt).
set -uo pipefail
base=$1 new=$2 cases=$3 R=$4; t0=$SECONDS
export FP4GEMM_DIGEST=1
for rnd in $(seq 1 ${ROUNDS:-2}); do for a in $base $new; do
  vals=""; [ "${ACT:-bf16}" = bf16 ] && vals="--values checkpoint"
  timeout 200 /tmp/ab/$a/fp4gemm bench --suite layer --act ${ACT:-bf16} --weight-layout pieces $vals \
    --cases $cases --iters 100 --json $R/layer_${a}_r$rnd.json > $R/layer_${a}_r$rnd.txt 2>&1
  echo "layer $a round $rnd rc $? [$((SECONDS - t0)) s]"
done; done
python3 - "$R" "$base" "$new" <<'PY' | tee $R/ab.txt
import json, sys, glob, re
d, base, new = sys.argv[1:4]
rows, dig = {}, {}
for a in (base, new):
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.json")):
        for c in json.load(open(f))["cases"]:
            rows.setdefault((c["model"], c["tokens"], c["index"]), {base: [], new: []})[a].append(c["time_us"]["median"])
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.txt")):
        for m in re.finditer(r"^digest layer (\d+) (\S+)$", open(f).read(), re.M):
            dig.setdefault(int(m.group(1)), {base: set(), new: set()})[a].add(m.group(2))
import os
print(f"layer --act {os.environ.get('ACT', 'bf16')} pieces, median us per round: {base} | {new} | {new}/{base} of the means | digests")
for (model, t, i), r in sorted(rows.items()):
    b, n = sum(r[base]) / max(1, len(r[base])), sum(r[new]) / max(1, len(r[new]))
    g = dig.get(i, {base: set(), new: set()})
    same = "same" if g[base] == g[new] and len(g[base]) == 1 else f"DIFFER {g}"
    print(f"  {model:16s} T {t:5d}: " + " / ".join(f"{x:.1f}" for x in r[base]) + " | " +
          " / ".join(f"{x:.1f}" for x in r[new]) + f" | {n / b:.4f} | {same}")
PY

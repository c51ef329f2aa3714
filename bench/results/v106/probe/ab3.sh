#!/usr/bin/env bash
# v106: v102's ab_layer.sh for several CLIs. Usage: ab3.sh CASES OUTDIR BASE OTHER...
# /tmp/ab/X/fp4gemm for each X, alternating in the given order, ROUNDS rounds (default 2) of `fp4gemm bench --suite
# layer --act bf16 --weight-layout pieces --values checkpoint --iters 100` with FP4GEMM_DIGEST=1; then per case the
# medians per round, each OTHER / BASE of the means, and whether the digests agree with BASE's (OUTDIR/ab.txt).
set -uo pipefail
cases=$1 R=$2; shift 2; t0=$SECONDS
export FP4GEMM_DIGEST=1
for rnd in $(seq 1 ${ROUNDS:-2}); do for a in "$@"; do
  timeout 200 /tmp/ab/$a/fp4gemm bench --suite layer --act bf16 --weight-layout pieces --values checkpoint \
    --cases $cases --iters 100 --json $R/layer_${a}_r$rnd.json > $R/layer_${a}_r$rnd.txt 2>&1
  echo "layer $a round $rnd rc $? [$((SECONDS - t0)) s]"
done; done
python3 - "$R" "$@" <<'PY' | tee $R/ab.txt
import json, sys, glob, re
d, names = sys.argv[1], sys.argv[2:]
rows, dig = {}, {}
for a in names:
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.json")):
        for c in json.load(open(f))["cases"]:
            rows.setdefault((c["model"], c["tokens"], c["index"]), {n: [] for n in names})[a].append(c["time_us"]["median"])
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.txt")):
        for m in re.finditer(r"^digest layer (\d+) (\S+)$", open(f).read(), re.M):
            dig.setdefault(int(m.group(1)), {n: set() for n in names})[a].add(m.group(2))
base = names[0]
print("layer --act bf16 pieces, median us per round: " + " | ".join(names) + " | " +
      " | ".join(f"{n}/{base}" for n in names[1:]) + " (of the means) | digests")
for (model, t, i), r in sorted(rows.items()):
    mean = {n: sum(r[n]) / max(1, len(r[n])) for n in names}
    g = dig.get(i, {n: set() for n in names})
    same = "same" if all(g[n] == g[base] for n in names) and len(g[base]) == 1 else f"DIFFER {g}"
    print(f"  {model:16s} T {t:5d}: " + " | ".join(" / ".join(f"{x:.1f}" for x in r[n]) for n in names) + " | " +
          " | ".join(f"{mean[n] / mean[base]:.4f}" for n in names[1:]) + f" | {same}")
PY

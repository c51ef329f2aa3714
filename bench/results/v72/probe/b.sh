#!/usr/bin/env bash
# Prepared for the next session (not run): branch exp/pair-bookkeeping's CLI (.carry/v115c) against main's (.carry/v111c,
# 3e603f7 = main's device code) in the same call: the W4A16 and NVFP4 layer suites on pieces, alternating, 2 rounds,
# FP4GEMM_DIGEST=1 (every digest must equal main's: the change is addressing only). Prediction: the cells whose GEMMs run
# the 16-token class (T 8-256) -1..-4 %, the rest flat. Carry .carry/v115c and .carry/v111c.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for v in v115c v111c; do C=/tmp/$v; mkdir -p $C; [ -x $C/fp4gemm ] || { xz -dc .carry/$v/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm; }; done
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for act in bf16 nvfp4; do for v in v115c v111c; do
  timeout 100 /tmp/$v/fp4gemm bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
  echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
python3 - $R <<'PY'
import json, sys, glob, statistics as st
R = sys.argv[1]
for act in ('bf16', 'nvfp4'):
    def load(v):
        t = {}
        for f in sorted(glob.glob(f'{R}/layer_{act}_{v}_r*.json')):
            for c in json.load(open(f))['cases']:
                t.setdefault((c.get('model'), c.get('tokens')), []).append(c['time_us']['median'])
        return {k: min(x) for k, x in t.items()}
    new, old = load('v115c'), load('v111c')
    r = {k: new[k] / old[k] for k in new if k in old}
    print(act, 'new / main median', round(st.median(r.values()), 4), 'min', round(min(r.values()), 4), 'max', round(max(r.values()), 4))
    for k in sorted(r, key=lambda k: r[k])[:6]: print('  ', k, round(r[k], 4))
PY
for act in bf16 nvfp4; do for v in v115c v111c; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  cmp -s $R/dig_${act}_v115c.txt $R/dig_${act}_v111c.txt && echo "$act digests equal" || echo "$act digests DIFFER"; done
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

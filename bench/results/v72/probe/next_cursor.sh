#!/usr/bin/env bash
# Prepared for the next session (not run): branch exp/decode-cursor (the decode kernels on pieces keep one weight
# cursor: the second row's words are the first's + 512 in every chunk; SASS: the copy's second LDGSTS takes
# [R.64+0x200], one 64-bit add per chunk fewer, no spills) against main with the range-check fix (.carry/v118n).
# Two calls on one warm machine: `carry .carry/v118n`, `bash next_cursor.sh unpack`; then `carry .carry/v119n`,
# `bash next_cursor.sh`. The decode and pieces tests with memcheck, then the W4A16 and NVFP4 layer suites on pieces,
# alternating, 2 rounds, FP4GEMM_DIGEST=1. Expected: digests equal, the decode cells (T 1-8) -0.5..-1 %.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for c in v118n v119n; do
  B=/tmp/$c; mkdir -p $B; [ -f $B/done ] || [ ! -f .carry/$c/b.tar.xz ] || { xz -dc .carry/$c/b.tar.xz | tar xf - -C $B; touch $B/done; }
done
[ "${1:-}" = unpack ] && { ls /tmp/v118n /tmp/v119n; exit 0; }
timeout 200 /tmp/v119n/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -8
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/v119n/gt \
  --gtest_filter='MoeLayerPieces.*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for act in bf16 nvfp4; do for v in v119n v118n; do

  timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
  echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
python3 - $R <<'PY'
import json, sys, glob, statistics as st
R = sys.argv[1]
for act in ('bf16', 'nvfp4'):
    def load(v):
        t = {}
        for f in sorted(glob.glob(f'{R}/layer_{act}_{v}_r*.json')):
            try: cases = json.load(open(f))['cases']
            except Exception as e: print('unreadable', f, e); continue
            for c in cases: t.setdefault((c.get('model'), c.get('tokens')), []).append(c['time_us']['median'])
        return {k: min(x) for k, x in t.items()}
    new, old = load('v119n'), load('v118n')
    r = {k: new[k] / old[k] for k in new if k in old}
    if not r: continue
    print(act, 'branch / main median', round(st.median(r.values()), 4), 'min', round(min(r.values()), 4), 'max', round(max(r.values()), 4))
    for k in sorted(r): print('  ', k, round(new[k], 1), round(old[k], 1), round(r[k], 4))
PY
for act in bf16 nvfp4; do for v in v119n v118n; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  cmp -s $R/dig_${act}_v119n.txt $R/dig_${act}_v118n.txt && echo "$act digests equal" || echo "$act digests DIFFER"; done
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

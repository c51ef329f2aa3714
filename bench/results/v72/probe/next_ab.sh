#!/usr/bin/env bash
# Prepared for the next session (not run): build NEW against build OLD on the same warm machine (bundles .carry/NEW and
# .carry/OLD: gt, cli, py_new). Two calls: `carry .carry/OLD`, `bash next_ab.sh NEW OLD unpack`; then `carry .carry/NEW`,
# `bash next_ab.sh NEW OLD [tests]`. With `tests`: the decode and pieces gtests of NEW and memcheck of MoeLayerPieces.
# Then the W4A16 and NVFP4 layer suites on pieces, alternating, 2 rounds, FP4GEMM_DIGEST=1, ratios and digests.
#   the range-check fix against the build before it:   bash next_ab.sh v118n v117n
#     (expected: digests equal unless the old build hit the defect on the suites' data; decode cells flat or faster)
#   branch exp/decode-cursor (61aea20) against main:     bash next_ab.sh v119n v118n tests
#     (one weight cursor on pieces; expected: digests equal, the decode cells T 1-8 -0.5..-1 %)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
NEW=${1:?NEW bundle}; OLD=${2:?OLD bundle}
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for c in $OLD $NEW; do
  B=/tmp/$c; mkdir -p $B; [ -f $B/done ] || [ ! -f .carry/$c/b.tar.xz ] || { xz -dc .carry/$c/b.tar.xz | tar xf - -C $B; touch $B/done; }
done
[ "${3:-}" = unpack ] && { ls /tmp/$OLD /tmp/$NEW; exit 0; }
if [ "${3:-}" = tests ]; then
timeout 200 /tmp/$NEW/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -8
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/$NEW/gt \
  --gtest_filter='MoeLayerPieces.*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
fi
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for act in bf16 nvfp4; do for v in $NEW $OLD; do
  timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
  echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
done; done; done
python3 - $R $NEW $OLD <<'PY'
import json, sys, glob, statistics as st
R, NEW, OLD = sys.argv[1:4]
for act in ('bf16', 'nvfp4'):
    def load(v):
        t = {}
        for f in sorted(glob.glob(f'{R}/layer_{act}_{v}_r*.json')):
            try: cases = json.load(open(f))['cases']
            except Exception as e: print('unreadable', f, e); continue
            for c in cases: t.setdefault((c.get('model'), c.get('tokens')), []).append(c['time_us']['median'])
        return {k: min(x) for k, x in t.items()}
    new, old = load(NEW), load(OLD)
    r = {k: new[k] / old[k] for k in new if k in old}
    if not r: continue
    print(act, 'NEW / OLD median', round(st.median(r.values()), 4), 'min', round(min(r.values()), 4), 'max', round(max(r.values()), 4))
    for k in sorted(r): print('  ', k, round(new[k], 1), round(old[k], 1), round(r[k], 4))
PY
for act in bf16 nvfp4; do for v in $NEW $OLD; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  cmp -s $R/dig_${act}_$NEW.txt $R/dig_${act}_$OLD.txt && echo "$act digests equal" || echo "$act digests DIFFER"; done
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v72 c (one H200): branch exp/pair-barrier (one full / empty barrier per stage pair in the MoE kernel's 16-token class)
# from two bundles unpacked into /tmp/v116 by earlier calls on the same warm machine (.carry/v116n/b.tar.xz: gt, cli,
# py_new -- one build, xz with a 192 MiB dictionary shares their device code; .carry/v116m/b.tar.xz: cli_main, py_main):
# gt (the branch's gtests), cli (the branch's CLI), cli_main (merged main = exp/pair-bookkeeping 0dcf1dd's device code),
# py_new/ py_main/ (the two Python extensions). 1) the MoE / pieces / GLU / layer gtests, memcheck, racecheck of the
# paired loop; 2) the W4A16 and NVFP4 layer suites on pieces, branch against main, alternating, 2 rounds, digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/v116; mkdir -p $B
for c in v116n v116m; do [ -f $B/$c.done ] || [ ! -f .carry/$c/b.tar.xz ] || { xz -dc .carry/$c/b.tar.xz | tar xf - -C $B; touch $B/$c.done; }; done
echo "unpacked [$((SECONDS - t0)) s]"
if [ "${SKIP_TESTS:-0}" = 0 ]; then  # (the first call: tests only, STOP_AFTER_TESTS=1)
timeout 420 $B/gt --gtest_filter='*Moe*:*Pieces*:*Paired*:*Glu*:*Layer*:-*MoeRandom.*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -16
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/gt \
  --gtest_filter='*MoeSanitizer*:*BadRouting*:*MoePairedMainloop*:*MoeLayerPieces*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
[ "${RACE:-0}" = 1 ] && timeout 150 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 $B/gt \
  --gtest_filter='*MoePairedMainloop*' > $R/racecheck.txt 2>&1
echo "racecheck rc $? [$((SECONDS - t0)) s]"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $R/racecheck.txt | head -4
fi
if [ "${STOP_AFTER_TESTS:-0}" = 1 ]; then gzip $R/*.txt; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"; exit 0; fi
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for act in bf16 nvfp4; do for v in cli cli_main; do
  timeout 100 $B/$v bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
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
    new, old = load('cli'), load('cli_main')
    r = {k: new[k] / old[k] for k in new if k in old}
    print(act, 'new / main median', round(st.median(r.values()), 4), 'min', round(min(r.values()), 4), 'max', round(max(r.values()), 4))
    for k in sorted(r, key=lambda k: r[k]): print('  ', k, round(new[k], 1), round(old[k], 1), round(r[k], 4))
PY
for act in bf16 nvfp4; do for v in cli cli_main; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
  cmp -s $R/dig_${act}_cli.txt $R/dig_${act}_cli_main.txt && echo "$act digests equal" || echo "$act digests DIFFER"; done
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

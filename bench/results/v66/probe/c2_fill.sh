#!/usr/bin/env bash
# v66 c2 (one H200): exp/decode-fill-unroll (F: the decode kernels' ring fill unrolled for linear scales, so each fill's
# scale-code loads land in the registers the loop reads them from, instead of the rolled fill's code rotation waiting for
# the previous fill's loads) against main (M, 8aa7f4a): the CLI layer at T 1 / 2 / 4 / 8, gpt-oss-120b and
# Qwen3-30B-A3B shapes, W4A16 checkpoint values with linear and blocked scales (blocked: a control, its kernels are
# unchanged), W4A4 NVFP4 linear and blocked; 2 rounds interleaved, L2 flushed, median of 100. Then the layer suite's
# digests (W4A16, W4A4 NVFP4), one round per side. Carry .carry/v93 (cli_main, cli_fill).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v93; mkdir -p $V; xz -dc .carry/v93/bins.tar.xz | tar xf - -C $V; t0=$SECONDS
R=$OUT/r; mkdir -p $R/dec $R/suite
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for v in main fill; do B=$V/cli_$v
  for t in 1 2 4 8; do for m in q g; do S=$Q; [ $m = g ] && S=$G
    for sc in linear blocked; do
      timeout 30 $B $S --act bf16 --values checkpoint --scales $sc --iters 100 --tokens $t > $R/dec/${m}${t}_w16_${sc}_${v}_$rnd.txt 2>&1
      timeout 30 $B $S --act nvfp4 --scales $sc --iters 100 --tokens $t > $R/dec/${m}${t}_nv_${sc}_${v}_$rnd.txt 2>&1
    done
  done; done
done; done
echo "timings [$((SECONDS - t0)) s]"
python3 - $R/dec <<'PY'
import sys, os, re, collections
d = sys.argv[1]; t = collections.defaultdict(dict)
for f in os.listdir(d):
    m = re.match(r'(\w)(\d)_(w16|nv)_(linear|blocked)_(main|fill)_(\d)\.txt', f)
    if not m: continue
    s = open(os.path.join(d, f)).read(); x = re.search(r'^time: ([0-9.]+)', s, re.M)
    t[m.groups()[:4]][(m.group(5), m.group(6))] = float(x.group(1)) if x else float('nan')
for k in sorted(t, key=lambda k: (k[0], k[2], k[3], int(k[1]))):
    v = t[k]; mm = [v.get(('main', r), float('nan')) for r in '12']; ff = [v.get(('fill', r), float('nan')) for r in '12']
    am, af = sum(mm) / 2, sum(ff) / 2
    print(f"{'gpt-oss' if k[0] == 'g' else 'Qwen3':7} T {k[1]} {k[2]:3} {k[3]:7}  main {mm[0]:7.2f} {mm[1]:7.2f}  fill {ff[0]:7.2f} {ff[1]:7.2f}  {af - am:+6.2f} us ({af / am - 1:+.1%})")
PY
export FP4GEMM_DIGEST=1
for v in main fill; do for act in bf16 nvfp4; do
  timeout 150 $V/cli_$v bench --suite layer --act $act --settle-ms 100 --json $R/suite/layer_${act}_$v.json > $R/suite/layer_${act}_$v.txt 2>&1
done; done
for act in bf16 nvfp4; do echo "digests $act:"; diff <(grep -i digest $R/suite/layer_${act}_main.txt) <(grep -i digest $R/suite/layer_${act}_fill.txt) > /dev/null && echo "  identical ($(grep -ci digest $R/suite/layer_${act}_main.txt) lines)" || echo "  DIFFER"; done
echo "done [$((SECONDS - t0)) s]"

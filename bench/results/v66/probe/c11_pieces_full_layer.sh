#!/usr/bin/env bash
# v66 c11 (one H200, warm after c10: /tmp/v98 holds the CLIs; else carry .carry/v95 and .carry/v97): the whole layer
# suite's general path (every model in order, as c9) for the pieces build twice and main once, digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v98; mkdir -p $V; [ -x $V/cli_pieces ] || for d in v95 v97; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done
t0=$SECONDS; R=$OUT/r; mkdir -p $R
export FP4GEMM_DIGEST=1
run() { env $2 timeout 100 $V/$1 bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 > $R/$3.txt 2>&1; grep "^digest" $R/$3.txt > $R/$3.dig; echo "$3 [$((SECONDS - t0)) s]"; }
run cli_pieces FP4GEMM_EXP_PIECES=1 q1
run cli_main X=1 main
run cli_pieces FP4GEMM_EXP_PIECES=1 q2
for x in q1 q2; do echo "$x vs main: $(diff $R/main.dig $R/$x.dig | grep -c '^>') of $(wc -l < $R/main.dig) digests differ"; diff $R/main.dig $R/$x.dig | grep '^>' | head -8; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R

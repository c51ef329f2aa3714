#!/usr/bin/env bash
# v66 c10 (one H200; carry .carry/v95 and .carry/v97): c9's gpt-oss layer digests differed from main's for the
# pieces build (c8's matched). The layer suite's general path again: main, then the pieces build with
# FP4GEMM_EXP_PIECES=1 alone (as c9) twice, then with FP4GEMM_EXP_DECODE_FRAG=1 too (as c8).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v98; mkdir -p $V; for d in v95 v97; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done; ls $V; t0=$SECONDS; R=$OUT/r; mkdir -p $R
export FP4GEMM_DIGEST=1
run() { env $2 timeout 150 $V/$1 bench --suite layer --act bf16 --decode-tokens 0 --cases 15,16,17,18,19,20,21 --settle-ms 100 > $R/$3.txt 2>&1; grep "^digest" $R/$3.txt > $R/$3.dig; echo "$3 [$((SECONDS - t0)) s]"; }
run cli_main X=1 main
run cli_pieces FP4GEMM_EXP_PIECES=1 p1
run cli_pieces FP4GEMM_EXP_PIECES=1 p2
run cli_pieces "FP4GEMM_EXP_PIECES=1 FP4GEMM_EXP_DECODE_FRAG=1" pf
for x in p1 p2 pf; do echo "$x vs main: $(diff $R/main.dig $R/$x.dig | grep -c '^>') lines differ"; done
grep -E "^(1[5-9]|2[01]) " $R/*.txt | awk '{print $1, $3, $5}'
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R

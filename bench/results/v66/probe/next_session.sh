#!/usr/bin/env bash
# Prepared for the next session (not run): one call on one H200, carrying .carry/v99 (cli_fixed: main c213566, the
# layer built on its weights' stream) and .carry/v100 (cli_pieces_fixed: exp/fused-pieces 0182c4c, the same tool fix).
#   (1) c12: main's fixed CLI on the layer suite (general path), digests -- against c10 / c11's bytes for main;
#   (2) the pieces build (FP4GEMM_EXP_PIECES=1) on the whole layer suite three times, and on the MoE suites once, digests
#       against (1) and against main's MoE-suite bytes in c8 / c9 (`bench/results/v66/c8/ab/moe_*_A1.txt`):
#       c9's one mismatch (the gpt-oss cases) should not come back now that the plan-time copy cannot race the weights.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/vnext; mkdir -p $V; for d in v99 v100; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done; ls $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R; export FP4GEMM_DIGEST=1
run() { env $2 timeout 150 $V/$1 bench --suite $4 --act $5 $6 --settle-ms 100 > $R/$3.txt 2>&1; grep "^digest" $R/$3.txt > $R/$3.dig; echo "$3 [$((SECONDS - t0)) s]"; }
run cli_fixed X=1 main_layer layer bf16 "--decode-tokens 0"
for i in 1 2 3; do run cli_pieces_fixed FP4GEMM_EXP_PIECES=1 pieces_layer$i layer bf16 "--decode-tokens 0"; done
for a in bf16 nvfp4; do run cli_pieces_fixed FP4GEMM_EXP_PIECES=1 pieces_moe_$a moe $a ""; done
for i in 1 2 3; do echo "pieces layer $i vs main: $(diff $R/main_layer.dig $R/pieces_layer$i.dig | grep -c '^>') of $(wc -l < $R/main_layer.dig) differ"; done
for a in bf16 nvfp4; do echo "pieces moe $a vs c8's main: $(diff <(grep '^digest' bench/results/v66/c8/ab/moe_${a}_A1.txt) $R/pieces_moe_$a.dig | grep -c '^>') differ"; done
echo "layer vs c11's main: $(diff bench/results/v66/c11/main.dig $R/main_layer.dig | grep -c '^>') differ"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

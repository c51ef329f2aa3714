#!/usr/bin/env bash
# Issue 51's open MoE cells (v50: 1-4 % slower than 399676a in one round): three interleaved rounds of
# A = 399676a's CLI (.carry/cliOld: 399676a + probe/old_cli_digest.patch, target fp4gemm_cli) and
# B = main's CLI (.carry/cliNew), digests on. About 150 s. Then: python3 probe/ab_compare.py on the tarball.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; R=/tmp/ab; mkdir -p "$OUT" $R
export FP4GEMM_DIGEST=1
for rnd in 1 2 3; do
  for side in A B; do
    bin=.carry/cliOld/fp4gemm; [ $side = B ] && bin=.carry/cliNew/fp4gemm
    timeout 120 $bin bench --suite moe --act nvfp4 --cases 3,5,12,45,54 --settle-ms 300 --json $R/moe_w4a4_$side$rnd.json > $R/moe_w4a4_$side$rnd.txt 2>&1
    timeout 120 $bin bench --suite moe --act bf16 --cases 7,22,47,54,55 --settle-ms 300 --json $R/moe_w4a16_$side$rnd.json > $R/moe_w4a16_$side$rnd.txt 2>&1
    echo "round $rnd $side done"
  done
done
python3 .carry/probe/ab_compare.py $R
tar czf "$OUT/moe_cells.tgz" -C $R .

#!/usr/bin/env bash
# Second half of v52's next_session_desc_ab.sh (its call ran out of time before the tar): B = the patched CLI left
# at /tmp/b/build/tools/fp4gemm by that call on the same warm machine; A = main's (.carry/build). MoE suites only
# (the regression cells), interleaved rounds, a tar after every round so a timeout loses at most one round.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
A=.carry/build/tools/fp4gemm; B=/tmp/b/build/tools/fp4gemm; export FP4GEMM_DIGEST=1
[ -x $B ] || { echo "no patched CLI at $B"; exit 1; }
for rnd in 1 2 3; do for side in A B; do
  bin=$A; [ $side = B ] && bin=$B
  for act in nvfp4 bf16; do
    timeout 200 $bin bench --suite moe --act $act --settle-ms 100 --json $R/moe_${act}_$side$rnd.json > $R/moe_${act}_$side$rnd.txt 2>&1
  done
  echo "round $rnd $side $((SECONDS - t0)) s"
done; tar czf $OUT/r.tgz -C $OUT r; done

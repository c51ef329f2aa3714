#!/usr/bin/env bash
# For the next session (one H200): issue 51's wide-tile regression fix candidate (branch exp/desc-form =
# bench/results/v52/desc_form_wide_direct.patch: direct stores for the MoE classes of >= 112 tokens, which keeps
# the k-loops' wgmma descriptors uniform). Builds the patched CLI on the GPU machine (16 cores, ~3 min), then
# 3 interleaved rounds of the whole MoE suites (W4A4, W4A16), the seed and dense suites (the pointer-array kernels
# take the same change) and one of the layer suite (general path), A = main's CLI
# (.carry/build/tools/fp4gemm), B = patched, digests on; then bench/results/v50/probe/ab_compare.py on the folder.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
rm -rf /tmp/b && mkdir -p /tmp/b && cp -r CMakeLists.txt cmake include src tools tests python scripts pyproject.toml /tmp/b/ 2>/dev/null
(cd /tmp/b && patch -p1 < "$OLDPWD/bench/results/v52/desc_form_wide_direct.patch") > $R/patch.log 2>&1 || { echo "patch failed"; cat $R/patch.log; exit 1; }
cmake -S /tmp/b -B /tmp/b/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TOOLS=ON -DFP4GEMM_BUILD_TESTS=OFF \
  -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.log 2>&1 && ninja -C /tmp/b/build fp4gemm_cli > $R/build.log 2>&1
echo "build rc=$? $((SECONDS - t0)) s"; B=$(find /tmp/b/build -name fp4gemm -type f -perm -u+x | head -1); echo "B = $B"
A=.carry/build/tools/fp4gemm; export FP4GEMM_DIGEST=1
for rnd in 1 2 3; do for side in A B; do
  bin=$A; [ $side = B ] && bin=$B
  for act in nvfp4 bf16; do
    timeout 200 $bin bench --suite moe --act $act --settle-ms 100 --json $R/moe_${act}_$side$rnd.json > $R/moe_${act}_$side$rnd.txt 2>&1
  done
  timeout 120 $bin bench --suite seed --settle-ms 100 --json $R/seed_$side$rnd.json > $R/seed_$side$rnd.txt 2>&1
  timeout 120 $bin bench --suite dense --settle-ms 100 --json $R/dense_$side$rnd.json > $R/dense_$side$rnd.txt 2>&1
  [ $rnd = 1 ] && timeout 200 $bin bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $R/layer_bf16_$side$rnd.json > $R/layer_bf16_$side$rnd.txt 2>&1
  echo "round $rnd $side $((SECONDS - t0)) s"
done; done
python3 bench/results/v50/probe/ab_compare.py $R > $R/compare.txt 2>&1; tail -20 $R/compare.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R

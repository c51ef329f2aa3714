#!/usr/bin/env bash
# v102 (session 115), call 6 (carry .carry/pg_n.tar.xz): the routing's launches and the routed pre-pass as
# programmatic dependents (src/kernels/routing.cu, device/prepass.cuh, launch_routed). This tree built there with
# the CLI and the tests (/tmp/b3); the CLI layer suite, c899269's CLI (n: the routing's new CTA counts, CPU-built)
# against this tree's (p, built here), alternating, 2 rounds (cells on the general path, and decode-path cells as controls:
# their kernels and launches did not change); then the GPU tests of the routing, the layer and the MoE graphs.
# PART=tests skips the A/B (a later call on the same machine).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/c6; mkdir -p $R /tmp/ab
export FP4GEMM_DIGEST=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
[ -f .carry/pg_n.tar.xz ] && tar xJf .carry/pg_n.tar.xz -C /tmp/ab
B=/tmp/b3
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.txt 2>&1 || tail -20 $R/cmake.txt
  ninja -C $B tools/fp4gemm tests/fp4gemm_gpu_tests > $R/build.txt 2>&1 && touch $B/built
  echo "build rc $? [$((SECONDS - t0)) s]"; tail -2 $R/build.txt
fi
mkdir -p /tmp/ab/p && cp $B/tools/fp4gemm /tmp/ab/p/fp4gemm
if [ "${PART:-all}" != tests ]; then
C=${CASES:-11,12,32,13,14,19,34,20,21,9,10,15}
for rnd in 1 2; do for a in n p; do
  timeout 200 /tmp/ab/$a/fp4gemm bench --suite layer --act bf16 --weight-layout pieces --values checkpoint --cases $C \
    --iters 100 --json $R/layer_${a}_r$rnd.json > $R/layer_${a}_r$rnd.txt 2>&1
  echo "layer $a round $rnd rc $? [$((SECONDS - t0)) s]"
done; done
python3 - "$R" <<'PY' | tee $R/ab.txt
import json, sys, glob, re
d = sys.argv[1]
rows, dig = {}, {}
for a in ("n", "p"):
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.json")):
        for c in json.load(open(f))["cases"]:
            rows.setdefault((c["model"], c["tokens"], c["index"]), {"n": [], "p": []})[a].append(c["time_us"]["median"])
    for f in sorted(glob.glob(f"{d}/layer_{a}_r*.txt")):
        for m in re.finditer(r"^digest layer (\d+) (\S+)$", open(f).read(), re.M):
            dig.setdefault(int(m.group(1)), {"n": set(), "p": set()})[a].add(m.group(2))
print("layer W4A16 pieces checkpoint, median us per round: n (c899269) | p (this tree) | p/n of the means | digests")
for (m, t, i), r in sorted(rows.items()):
    nn, pp = sum(r["n"]) / max(1, len(r["n"])), sum(r["p"]) / max(1, len(r["p"]))
    g = dig.get(i, {"n": set(), "p": set()})
    same = "same" if g["n"] == g["p"] and len(g["n"]) == 1 else f"DIFFER {g}"
    print(f"  {m:16s} T {t:5d}: " + " / ".join(f"{x:.1f}" for x in r["n"]) + " | " +
          " / ".join(f"{x:.1f}" for x in r["p"]) + f" | {pp / nn:.4f} | {same}")
PY
fi
if [ "${PART:-all}" != ab ]; then
F=${F:-'AlignRouting*:AlignRoutingRows*:MoeRouting*:MoeLayer*:MoeGraph*:MoeGraphCache*:MoeBadRouting*'}
timeout ${TT:-300} $B/tests/fp4gemm_gpu_tests --gtest_brief=1 --gtest_filter="$F" > $R/gtests.txt 2>&1
echo "gtests rc $? [$((SECONDS - t0)) s]"; grep -E "PASSED|FAILED|SKIPPED" $R/gtests.txt | head -20
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/fp4gemm_gpu_tests \
    --gtest_filter='AlignRoutingRows*:MoeLayerGraph.GeneralPath*:MoeLayerGraph.ReplaysWithANewRoutingEachTime' \
    > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -4
done
fi
tar czf $OUT/c6.tgz -C $OUT c6; echo "call6 done [$((SECONDS - t0)) s]"

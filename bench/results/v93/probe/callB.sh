#!/usr/bin/env bash
# v93 call B (one H200): build the working tree (exp/glu-drain) on the GPU machine in /tmp/gdb (outside the carried
# tree, kept while the machine stays warm): library, CLI, both test tiers; the host tier's ctest (SASS checks
# included: kernel stack, k-loop local memory, load pairs); then /tmp/gd/{cli,gt} for call G. Also unpacks main's
# build (m1, BUNDLE) to /tmp/m1 when a bundle is carried.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p $OUT/b
if [ -n "${BUNDLE:-}" ]; then
  H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $BUNDLE [$((SECONDS - t0)) s]"; }
fi
nproc; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
cmake -S . -B /tmp/gdb -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/b/configure.txt 2>&1 || { tail -20 $OUT/b/configure.txt; exit 4; }
echo "configured [$((SECONDS - t0)) s]"
ninja -C /tmp/gdb -j ${JOBS:-16} > $OUT/b/build.txt 2>&1; rc=$?
echo "build rc $rc [$((SECONDS - t0)) s]"; tail -3 $OUT/b/build.txt
[ $rc = 0 ] || exit 5
mkdir -p /tmp/gd && ln -sf /tmp/gdb/tools/fp4gemm /tmp/gd/cli && ln -sf /tmp/gdb/tests/fp4gemm_gpu_tests /tmp/gd/gt
ls -la /tmp/gdb/tools/fp4gemm /tmp/gdb/tests/fp4gemm_gpu_tests
(cd /tmp/gdb && timeout 240 ctest -L host_tier --output-on-failure > $OUT/b/host_tier.txt 2>&1; echo "host tier rc $? [$((SECONDS - t0)) s]"; tail -4 $OUT/b/host_tier.txt)
gzip -f $OUT/b/*.txt; echo "done [$((SECONDS - t0)) s]"

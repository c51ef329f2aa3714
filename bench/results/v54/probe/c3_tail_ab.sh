#!/usr/bin/env bash
# v54 call 3 (one H200): decode kernel 2's tail. B = main bacd934's code (f16 NVFP4 decode; binary from b93c617, same
# kernels), T = + acq_rel arrival, no SC fences (60fa354), C = + one whole block per CTA where blocks <= CTAs, owned
# blocks without arrival (aa172c4). Tests on C; layer cases 1,8,9,15,16,22 x bf16/nvfp4 x 3 interleaved rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v54/gpu_tests_C
timeout 200 $T --gtest_filter='MoeLayer*' > $R/gtest_layer.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt
tail -2 $R/gtest_layer.log
timeout 150 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt
tail -1 $R/memcheck.log
timeout 150 compute-sanitizer --tool synccheck $T --gtest_filter='MoeLayerDecode.EveryTokenCount*' > $R/synccheck.log 2>&1; echo "synccheck rc=$?" | tee -a $R/rc.txt
tail -1 $R/synccheck.log; snap tests
export FP4GEMM_DIGEST=1
for rnd in 1 2 3; do for side in B T C; do for act in bf16 nvfp4; do
  timeout 100 .carry/v54/fp4gemm_$side bench --suite layer --act $act --cases 1,8,9,15,16,22 --settle-ms 100 \
    --json $R/layer_${act}_$side$rnd.json > $R/layer_${act}_$side$rnd.txt 2>&1
done; done; snap "round $rnd"; done

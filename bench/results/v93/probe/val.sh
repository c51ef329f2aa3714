#!/usr/bin/env bash
# v93 (copy of v78 probe/val.sh) validation of a build M (BUNDLE): the whole C++ GPU tier as 4 gtest shards side by side, with compute-sanitizer
# memcheck + synccheck of the W4A4 decode path through the CLI (NVFP4 / MXFP4, rows / pieces, T 3 / 8) beside them.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-q1}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 FP4GEMM_CLI=/tmp/$M/cli
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
NSH=${NSH:-4}
for i in $(seq 0 $((NSH - 1))); do
  (GTEST_TOTAL_SHARDS=$NSH GTEST_SHARD_INDEX=$i timeout ${SHT:-420} /tmp/$M/gt > $R/shard$i.txt 2>&1; echo "shard $i rc $? [$((SECONDS - t0)) s]") &
done
(
SANS=("memcheck nvfp4 pieces 3" "synccheck mxfp4 rows 3" "memcheck mxfp4 rows 8" "synccheck nvfp4 pieces 8")
[ -n "${SANS_LIST:-}" ] && IFS=';' read -ra SANS <<< "$SANS_LIST"  # (v82: e.g. "memcheck bf16 rows 8;...")
for tc in "${SANS[@]:0:${NSAN:-4}}"; do set -- $tc; tool=$1; shift; c="$*"
    timeout 100 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 /tmp/$M/cli layer \
      --experts 16 --hidden 2080 --inter 800 --tokens $3 --topk 2 --act $1 --weight-layout $2 --decode-tokens 8 \
      --iters 1 --warmup 0 > $R/${tool}_$1_$2_$3.txt 2>&1
    echo "$tool $c rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|SYNCCHECK SUMMARY|decode path" $R/${tool}_$1_$2_$3.txt | head -2
done
) &
[ -d /tmp/$M/py ] && [ "${PY:-1}" = 1 ] && (cp /tmp/$M/py/_fp4gemm*.so python/fp4gemm/ && cd tests/python && PYTHONPATH=../../python timeout ${PYT:-300} \
  python3 -m pytest -q -rs ${PYTESTS:-test_moe_layer_gpu.py test_pieces.py} > $R/py.txt 2>&1; echo "py rc $? [$((SECONDS - t0)) s]"; tail -3 $R/py.txt) &
wait
for i in $(seq 0 $((NSH - 1))); do echo "-- shard $i"; gsum $R/shard$i.txt; grep -E "^\[ RUN" $R/shard$i.txt | tail -1; done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-val}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

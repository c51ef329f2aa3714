#!/usr/bin/env bash
# v94 call M (one GPU): re-measure the layer suite's Mixtral T 1024 cell (case 27; v93 showed +2.3 % in one
# unrepeated sample) with the builds alternating: m1 (main a1e360f, before v93: .carry/v93m), m3 (main's v93
# kernels: .carry/v94b gd/cli) and df (exp/glu-defer: .carry/v94d). Stops starting rounds after DEADLINE s.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/m; mkdir -p $A
for b in ${BUNDLES:-v93m v94b v94d}; do
  H=$(md5sum < .carry/$b/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$b/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $b [$((SECONDS - t0)) s]"; }
done
[ -x /tmp/gd/cli ] && [ ! -e /tmp/m3 ] && mkdir -p /tmp/m3 && ln -s /tmp/gd/cli /tmp/m3/cli
for r in $(seq 1 ${ROUNDS:-3}); do
  [ $((SECONDS - t0)) -gt ${DEADLINE:-400} ] && { echo "deadline: stopped before round $r"; break; }
  line="r$r case ${CASES:-27}:"
  for v in ${BUILDS:-m1 m3 df}; do
    [ -x /tmp/$v/cli ] || continue
    f=$A/${v}_r$r.txt
    timeout 100 /tmp/$v/cli bench --suite layer --act bf16 --weight-layout pieces --cases ${CASES:-27} --no-peers > $f 2>&1
    line="$line $v $(grep -E '^[0-9]+ +mixtral' $f | awk '{print $5}' | tr '\n' ' ')"
  done
  echo "$line [$((SECONDS - t0)) s]"
done
gzip -f $A/*.txt; tar czf $OUT/${NAME:-m}.tgz -C $OUT m && rm -rf $A; echo "done [$((SECONDS - t0)) s]"

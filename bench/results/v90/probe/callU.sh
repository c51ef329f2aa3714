#!/usr/bin/env bash
# v90 call U (one H200): unpack main's CLI (BUNDLE v42: 6efc626's build, main's fused kernels) to /tmp/c9 for the
# calls after it on the same warm machine (two CLIs' bundles do not fit one carry).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
ls -la /tmp/c9/cli; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "done [$((SECONDS - t0)) s]"

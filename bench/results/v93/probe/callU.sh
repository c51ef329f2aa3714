#!/usr/bin/env bash
# v93 call U (one H200): unpack main's CLI and GPU tests (m1 = a1e360f's build, BUNDLE v93m) to /tmp/m1 for the calls
# after it on the same warm machine (two builds' bundles do not fit one carry).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
ls -la /tmp/m1/; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "done [$((SECONDS - t0)) s]"

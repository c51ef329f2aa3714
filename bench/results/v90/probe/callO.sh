#!/usr/bin/env bash
# v90 call O (one H200), two parts on one warm machine (two CLIs' bundles do not fit one carry):
# PART=1 (carry .carry/v47c): unpack 742b769's CLI (v89's measured form: the odd last k-block after the pair loop,
#   the 144-token class on pairs) to /tmp/old.
# PART=2 (carry .carry/v48b): 6ff7508's CLI (main's kernels since the merge: the odd last k-block inside the loop with
#   a drain, the 144-token class off pairs; unpacked to /tmp/ws) against it through callA.sh, alternating, 3 rounds:
#   is v90's ~1.7 % at gpt-oss T 512 real?
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
if [ "${PART:-1}" = 1 ]; then
  rm -rf /tmp/oldx && mkdir -p /tmp/oldx && xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp/oldx ws/cli && mkdir -p /tmp/old \
    && mv /tmp/oldx/ws/cli /tmp/old/cli && ls -la /tmp/old/cli; echo "done [$((SECONDS - t0)) s]"; exit 0
fi
[ -x /tmp/old/cli ] || { echo "no /tmp/old/cli (part 1 did not run on this machine)"; exit 3; }
VARS="old ws" ACTS="" ROUNDS=3 CELLS="gptoss 512;gptoss 1024;qwen3 256;qwen3 512" NAME=${NAME:-o} \
  exec bash bench/results/v90/probe/callA.sh

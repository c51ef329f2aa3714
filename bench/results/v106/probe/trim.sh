#!/usr/bin/env bash
# v106: the device tool counts the working tree in disk blocks (~57 MiB of its 64 MiB carry limit, most of it
# bench/results), so a call that carries CPU-built binaries (~16 MiB each, xz) does not fit. `trim.sh out` moves every
# bench/results/vNN except the ones KEEP names (default: v95 v102 v106, what v106's probes read) to /tmp/trimmed_results;
# `trim.sh back` restores them. Never commit while trimmed (the moves would read as deletions).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
S=/tmp/trimmed_results
case ${1:-} in
  out) mkdir -p $S; for d in bench/results/*; do
         keep=0; for k in ${KEEP:-v95 v102 v106}; do [ "$d" = bench/results/$k ] && keep=1; done
         [ $keep = 1 ] || mv "$d" $S/; done
       git ls-files -co --exclude-standard -z | du -c --files0-from=- 2>/dev/null | tail -1 ;;
  back) [ -d $S ] && mv $S/* bench/results/ && rmdir $S; git status --short | head ;;
  *) echo "usage: trim.sh out|back" >&2; exit 2 ;;
esac

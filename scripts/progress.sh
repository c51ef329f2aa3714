#!/usr/bin/env bash
# Sourced helper: `with_progress LABEL LOG cmd...` runs cmd with its output in LOG, printing a line
# every 15 s while it runs (so long silent phases -- apt, pip, the Python build -- show they are
# alive), and the log's tail if it fails. Returns the command's exit code.
with_progress() {
  local label=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( (SECONDS - t0) % 15 == 0 )) && kill -0 "$pid" 2>/dev/null; then
      echo "  ... $label: $((SECONDS - t0)) s (log: $log)"
    fi
  done
  local rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "  $label FAILED (exit $rc); last lines of $log:" >&2
    tail -25 "$log" >&2
  else
    echo "  $label: done in $((SECONDS - t0)) s"
  fi
  return "$rc"
}

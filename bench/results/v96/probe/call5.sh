#!/usr/bin/env bash
# Prepared for the next session (not run: no machine could be started at the end of session 109; v97 adds the floors at
# this card's own rates, and runs it after v97's call1 on the same warm machine): on a GPU
# machine, the HBM floor's copy rate (copy_rate.py), then issue 52's table -- main built there (v95's table.sh), two
# sustained rounds of 100 and a burst of 20, triton_kernels in the same run, describe() on -- summarised by
# bench/issue52_rounds.py (median / min / max, targets judged on an H200 only). Carry .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p $OUT/c5
python3 bench/results/v96/probe/copy_rate.py 2>&1 | tee $OUT/c5/copy_rate.txt
ROUND_REPS="100 100 20" HM=${HM:-0} SMOKE=0 MAXB=9999 NAME=c5_table bash bench/results/v95/probe/table.sh
mkdir -p /tmp/c5 && tar xzf $OUT/c5_table.tgz -C /tmp/c5
# this card's measured rates (copy_rate.py's last line: RATES <TB/s> <TFLOP/s>)
read -r _ CR BR < <(grep '^RATES ' $OUT/c5/copy_rate.txt)
RATES=(); [ -n "${CR:-}" ] && RATES=(--copy-rate-tbps "$CR" --bf16-tflops "$BR")
# the table with the issue's floors (its H200 rates; on another card no floors, no targets judged)
python3 bench/issue52_rounds.py --rounds /tmp/c5/r/tk1/tk_layer.json /tmp/c5/r/tk2/tk_layer.json \
  --burst /tmp/c5/r/tk3/tk_layer.json --min-reps 100 --json $OUT/c5/issue52_table.json | tee $OUT/c5/issue52_table.md
# and with the floors at this card's own measured rates (skipped where copy_rate.py gave none)
if [ ${#RATES[@]} -gt 0 ]; then
  python3 bench/issue52_rounds.py --rounds /tmp/c5/r/tk1/tk_layer.json /tmp/c5/r/tk2/tk_layer.json \
    --min-reps 100 "${RATES[@]}" > $OUT/c5/issue52_table_own_rates.md
else
  echo "no RATES line from copy_rate.py: no table at this card's own rates" | tee $OUT/c5/issue52_table_own_rates.md
fi
tar czf $OUT/c5.tgz -C $OUT c5; echo "call5 done [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v82 call F (carry .carry/v8: p0 / q1 / r1 / r2 CLIs): the evict_first policy kept for weights in pieces only.
# r1 = rows without a policy (p0's copy), pieces as q1; r2 = rows with evict_first and no L2::128B fetch hint.
# SASS of the decode kernels r1 vs q1 and p0 (register names normalised), then p0 / q1 / r1 / r2 alternated per case,
# two rounds, CLI `layer` W4A16, checkpoint-like scales: rows + linear, rows + blocked, pieces + blocked.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p $OUT/sass
H=$(md5sum < .carry/v8/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/v8/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
for v in p0 q1 r1 r2; do
  cuobjdump -sass /tmp/$v/cli | awk '/Function : .*decode/{on=1} /Function : /{if($0 !~ /decode/) on=0} on' \
    | sed -E 's/\/\*[0-9a-f]{4}\*\///; s/\b(R|UR|P|UP)[0-9]+\b/\1x/g; s/0x[0-9a-f]+/0xN/g' > $OUT/sass/$v.txt
  echo "sass $v: $(grep -c 'Function :' $OUT/sass/$v.txt) decode functions, $(grep -cE '^\s+[A-Z@]' $OUT/sass/$v.txt) lines, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass/$v.txt)"
done
for a in "q1 r1" "p0 r1" "q1 r2"; do set -- $a; echo "diff $1 $2: $(diff $OUT/sass/$1.txt $OUT/sass/$2.txt | grep -c '^[<>]') lines"; done
gzip $OUT/sass/*.txt
BUNDLE=v8 VS="p0 q1 r1 r2" ROUNDS=2 ACT=bf16 WL=rows XARGS="--scales linear" NCUCASES=" " \
  CASES="gptoss 1;gptoss 8;gptoss 16;qwen3 1;qwen3 8;qwen3 64" NAME=f_rows_linear bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed 's/^/rows-linear /'
BUNDLE=v8 VS="p0 q1 r1 r2" ROUNDS=2 ACT=bf16 WL=rows NCUCASES=" " \
  CASES="gptoss 1;gptoss 8;gptoss 16;qwen3 1;qwen3 8;qwen3 64" NAME=f_rows_blocked bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed 's/^/rows-blocked /'
BUNDLE=v8 VS="p0 q1 r1" ROUNDS=2 ACT=bf16 WL=pieces NCUCASES=" " \
  CASES="gptoss 1;gptoss 8;gptoss 64;qwen3 8;qwen3 64" NAME=f_pieces bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed 's/^/pieces-blocked /'
echo "callF [$((SECONDS - t0)) s]"

#!/usr/bin/env bash
# v76 p (one H200), prepared for the next session: which pipe the decode loop saturates. ncu's ComputeWorkloadAnalysis
# and InstructionStats sections (pipe utilisation per pipe: alu, fma / fmaheavy, fp16, lsu, tensor; executed
# instructions per opcode) of the fused decode kernel and of the two kernels, gpt-oss W4A16 pieces T 8 and T 1.
# Reading: per chunk a warp issues ~88 integer-ALU instructions (LOP3, SHF, ISETP, IADD3, LEA, SEL) and ~100 on the
# FMA pipe (IMAD*, HMUL2, VIADD); at 16 lanes a cycle either pipe needs ~2 cycles per warp instruction.
# BUNDLE=<tag> V=<build> (/tmp/<V>/cli).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/p; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
for T in ${TS:-8 1}; do for fu in 1 0; do
  FP4GEMM_DECODE_FUSED=$fu timeout 200 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 \
    --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight --csv --page details \
    /tmp/$V/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
    --weight-layout pieces --iters 2 --warmup 1 > $R/pipes_T${T}_f$fu.csv 2> $R/pipes_T${T}_f$fu.err || echo "ncu T $T f $fu FAILED"
  grep -iE "pipe|Issue Slots|Executed Ipc" $R/pipes_T${T}_f$fu.csv | cut -c1-220 | head -30
  echo "T $T fused $fu [$((SECONDS - t0)) s]"
done; done
gzip -f $R/*.csv 2>/dev/null
tar czf $OUT/p.tgz -C $OUT p && rm -rf $R
echo "done [$((SECONDS - t0)) s]"

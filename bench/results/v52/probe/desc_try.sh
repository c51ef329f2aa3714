#!/bin/bash
# One fused-kernel unit to PTX and a cubin with the project's flags (~45-110 s on 2 cores), for SASS
# comparisons (desc_cmp.py MAIN_OBJ THIS_CUBIN [only-diff]). EXTRA: extra nvcc flags, e.g. -DEXP_DIRECT
# with bench/results/v52/desc_form_diag.patch applied.
# usage: desc_try.sh NAME TU [SRCDIR]  -> /tmp/wtb/NAME_TU.cubin
set -e
N=$1; TU=$2; SRC=${3:-$PWD}
mkdir -p /tmp/wtb; cd $SRC
/usr/local/cuda/bin/nvcc -I$SRC/include -I$SRC/src -O3 -DNDEBUG -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo $EXTRA -x cu -ptx src/kernels/sm90/fused_variant_$TU.cu -o /tmp/wtb/${N}_$TU.ptx
/usr/local/cuda/bin/ptxas -arch=sm_90a -O3 -lineinfo /tmp/wtb/${N}_$TU.ptx -o /tmp/wtb/${N}_$TU.cubin

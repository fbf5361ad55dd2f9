/* mpinn.optim._fused_v3: the same kernels as fused.c, built for x86-64-v3 CPUs (AVX2) by
   mpinn/optim/build_backend.py; a file of its own so that its object file is its own. */
#include "fused.c"

/* mpinn.optim._fused_native: the same kernels as fused.c, built for the installing machine's CPU
   (-march=native) by mpinn/optim/build_backend.py; a file of its own so that its object file is its own. */
#include "fused.c"

/* Op family: reduce. Kernels registered in lm_register_reduce_kernels(). */
#include "exec/kernel.h"

void lm_register_reduce_kernels(void) {}

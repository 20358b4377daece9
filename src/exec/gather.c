/* Op family: gather. Kernels registered in lm_register_gather_kernels(). */
#include "exec/kernel.h"

void lm_register_gather_kernels(void) {}

/* Op family: collective. Kernels registered in lm_register_collective_kernels(). */
#include "exec/kernel.h"

void lm_register_collective_kernels(void) {}

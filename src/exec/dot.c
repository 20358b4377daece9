/* Op family: dot. Kernels registered in lm_register_dot_kernels(). */
#include "exec/kernel.h"

void lm_register_dot_kernels(void) {}

/* Op family: misc. Kernels registered in lm_register_misc_kernels(). */
#include "exec/kernel.h"

void lm_register_misc_kernels(void) {}

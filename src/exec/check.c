/* Op family: check. Kernels registered in lm_register_check_kernels(). */
#include "exec/kernel.h"

void lm_register_check_kernels(void) {}

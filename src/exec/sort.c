/* Op family: sort. Kernels registered in lm_register_sort_kernels(). */
#include "exec/kernel.h"

void lm_register_sort_kernels(void) {}

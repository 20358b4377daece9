/* Op family: window. Kernels registered in lm_register_window_kernels(). */
#include "exec/kernel.h"

void lm_register_window_kernels(void) {}

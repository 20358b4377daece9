/* Op family: movement. Kernels registered in lm_register_movement_kernels(). */
#include "exec/kernel.h"

void lm_register_movement_kernels(void) {}

/* Op family: control. Kernels registered in lm_register_control_kernels(). */
#include "exec/kernel.h"

void lm_register_control_kernels(void) {}

/* The kernel registry: one table indexed by op code, filled once by each op family. */
#include <pthread.h>
#include "exec/kernel.h"

static lm_kernel_info g_kernels[LM_OP_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

void lm_kernel_register(lm_opcode code, lm_kernel_fn fn, lm_verify_fn verify, uint32_t flags) {
  if ((unsigned)code < LM_OP_COUNT) g_kernels[code] = (lm_kernel_info){fn, verify, flags};
}

const lm_kernel_info *lm_kernel_get(lm_opcode code) {
  if ((unsigned)code >= LM_OP_COUNT || !g_kernels[code].fn) return NULL;
  return &g_kernels[code];
}

static void init_all(void) {
  lm_register_elementwise_kernels();
  lm_register_reduce_kernels();
  lm_register_dot_kernels();
  lm_register_control_kernels();
  lm_register_movement_kernels();
  lm_register_gather_kernels();
  lm_register_sort_kernels();
  lm_register_window_kernels();
  lm_register_misc_kernels();
  lm_register_check_kernels();
  lm_register_collective_kernels();
}

void lm_kernels_init(void) { pthread_once(&g_once, init_all); }

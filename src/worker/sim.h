/* Simulated workers (`loom worker --simulate N`, sim.c): N lightweight workers in one process
 * that register real devices with a real controller, answer every message of the worker
 * protocol and execute nothing (results are zeros), for measuring the control plane at the
 * scale of thousands of hosts on one machine. docs/scale.md. */
#ifndef LM_WORKER_SIM_H
#define LM_WORKER_SIM_H

#include <stdint.h>
#include "common/err.h"
#include "worker/worker.h"

#define LM_SIM_MAX_WORKERS 4096

/* Runs n simulated workers with cfg's devices, slice, secret and controller until SIGINT or
 * SIGTERM (0) or until every one lost the controller or one cannot register (a negative status
 * with err set). */
int lm_sim_run(const lm_worker_config *cfg, uint32_t n, lm_err *err);

#endif

/* Launch traces (`loom trace start|stop`): while a trace records, the controller notes each
 * launch's arrival, dispatch and end, asks its workers for per-device phases (RUN.want_timings)
 * and keeps what they report in RUN_DONE. Recording happens on the loop thread (a few stores
 * per launch); stopping hands the finished records to the HTTP thread, which writes them as
 * Chrome trace event JSON (the format ui.perfetto.dev and chrome://tracing open). */
#ifndef LM_CONTROLLER_CTL_TRACE_H
#define LM_CONTROLLER_CTL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LM_TRACE_MAX_LAUNCHES 200000 /* launches one recording keeps; later ones are counted as dropped */

#define LM_TRACE_MAX_SPANS 16 /* collective calls shown per device and launch */

/* One collective call inside a device's execute phase. */
typedef struct ctl_trace_span {
  uint64_t start, dur, bytes;           /* start: since execute began (ns) */
  uint32_t op;                          /* CollectiveStats' op order */
} ctl_trace_span;

typedef struct ctl_trace_dev {
  uint32_t worker, local_index, device; /* device: the virtual id */
  uint64_t done;                        /* when the worker's RUN_DONE arrived (controller ns) */
  uint64_t queued, inputs, execute, transfer_out, report; /* the worker's phase durations (ns) */
  uint64_t coll_ns, coll_calls, coll_bytes; /* collective calls during execute */
  ctl_trace_span *spans;                /* [nspans] (malloc'd; NULL when none) */
  uint32_t nspans;
} ctl_trace_dev;

typedef struct ctl_trace_launch {
  uint64_t seq, session;
  char program[96];
  uint32_t ndev;                 /* devices in the launch */
  uint64_t arrived, sent, ended; /* controller ns (uv_hrtime) */
  int code;                      /* 0, or why it failed */
  uint32_t nworkers, nreported;  /* workers in it; RUN_DONEs received */
  uint64_t gen;                  /* the recording it belongs to */
  ctl_trace_dev *devs;           /* [ndevs] reported so far */
  uint32_t ndevs, cap;
  struct ctl_trace_launch *next; /* the finished list */
} ctl_trace_launch;

/* One recording's result, handed from the loop to whoever writes it. */
typedef struct ctl_trace_result {
  uint64_t started, stopped;     /* controller ns */
  ctl_trace_launch *launches;    /* finished, newest first */
  uint64_t count, dropped, in_flight;
  uint32_t nworkers;
  struct ctl_trace_worker { char host[64]; uint32_t pid; char slice[64]; } *workers; /* by worker id */
} ctl_trace_result;

void ctl_trace_result_free(ctl_trace_result *r);
/* The Chrome trace event JSON of r (malloc'd, NUL-terminated) or NULL when out of memory. */
char *ctl_trace_json(const ctl_trace_result *r);

#endif

/* Addresses and plain blocking sockets: "HOST:PORT" parsing and formatting for every process,
 * and the connect/send helpers the client library uses (its waits time out and can be
 * interrupted by a caller's hook, polled every few tens of milliseconds). */
#ifndef LM_NET_SOCK_H
#define LM_NET_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "common/err.h"

#define LM_ADDR_MAX 300 /* room for "[host]:port" with a 255-byte host */

/* Polled during blocking waits; a nonzero return cancels the wait with LOOM_CANCELLED. */
typedef int (*lm_interrupt_fn)(void *arg);

/* Milliseconds on a monotonic clock. */
uint64_t lm_now_ms(void);

/* Splits "HOST:PORT" or "[IPV6]:PORT" into host (NUL-terminated, at most hostcap - 1 bytes)
 * and port. Port 0 is accepted (listen on any free port). */
int lm_addr_split(const char *s, char *host, size_t hostcap, uint16_t *port, lm_err *err);
/* Resolves "HOST:PORT" (numeric or a name) to its first address. */
int lm_addr_resolve(const char *s, struct sockaddr_storage *ss, socklen_t *len, lm_err *err);
/* Formats sa as "1.2.3.4:5" or "[::1]:5". */
void lm_addr_format(const struct sockaddr *sa, char *buf, size_t cap);

/* Connects a blocking TCP socket (TCP_NODELAY, close-on-exec) to "HOST:PORT" within timeout_ms
 * (< 0: no limit), trying each resolved address. "@NAME" connects a Unix-domain stream socket to
 * the abstract name NAME instead (a worker's local socket; refused at once when nobody listens). */
int lm_sock_connect(const char *addr, int64_t timeout_ms, lm_interrupt_fn intr, void *intr_arg, int *out_fd,
                    lm_err *err);
/* Sends every byte of iov[0..iovcnt) (the array is modified), without SIGPIPE. deadline_ms is
 * absolute on lm_now_ms (0: none). */
int lm_sock_send_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms, lm_interrupt_fn intr,
                     void *intr_arg, lm_err *err);

#endif

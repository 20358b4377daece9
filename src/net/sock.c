/* Address parsing/formatting and blocking client sockets with timeouts and interrupt hooks. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "net/sock.h"

#define POLL_SLICE_MS 50 /* how often a blocking wait looks at the interrupt hook */

uint64_t lm_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int lm_addr_split(const char *s, char *host, size_t hostcap, uint16_t *port, lm_err *err) {
  if (!s || !*s) return lm_errf(err, LOOM_INVALID_ARGUMENT, "empty address (expected HOST:PORT)");
  const char *h = s, *colon;
  size_t hlen;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close[1] != ':')
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s' (expected [IPV6]:PORT)", s);
    h = s + 1;
    hlen = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(s, ':');
    if (!colon) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s' (expected HOST:PORT)", s);
    if (memchr(s, ':', (size_t)(colon - s)))
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s' (write IPv6 addresses as [ADDR]:PORT)", s);
    hlen = (size_t)(colon - s);
  }
  if (hlen == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s': no host", s);
  if (hlen >= hostcap) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s': host name too long", s);
  const char *p = colon + 1;
  if (!*p) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s': no port", s);
  unsigned long v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9' || v > 65535)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s': port must be a number 0-65535", s);
    v = v * 10 + (unsigned long)(*p - '0');
  }
  if (v > 65535) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad address '%s': port must be a number 0-65535", s);
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (uint16_t)v;
  return 0;
}

static int resolve_all(const char *s, struct addrinfo **out, lm_err *err) {
  char host[256], portstr[8];
  uint16_t port;
  LM_TRY(lm_addr_split(s, host, sizeof host, &port, err));
  snprintf(portstr, sizeof portstr, "%u", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  int rc = getaddrinfo(host, portstr, &hints, out);
  if (rc != 0) return lm_errf(err, LOOM_CONNECT, "cannot resolve '%s': %s", host, gai_strerror(rc));
  return 0;
}

int lm_addr_resolve(const char *s, struct sockaddr_storage *ss, socklen_t *len, lm_err *err) {
  struct addrinfo *ai;
  LM_TRY(resolve_all(s, &ai, err));
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

void lm_addr_format(const struct sockaddr *sa, char *buf, size_t cap) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    snprintf(buf, cap, "%s:%u", ip, ntohs(in->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    snprintf(buf, cap, "[%s]:%u", ip, ntohs(in6->sin6_port));
  } else {
    snprintf(buf, cap, "(family %d)", sa->sa_family);
  }
}

/* Waits for events on fd until the deadline (0: none), polling the interrupt hook. */
static int wait_fd(int fd, short events, uint64_t deadline, lm_interrupt_fn intr, void *arg, const char *what,
                   lm_err *err) {
  for (;;) {
    if (intr && intr(arg)) return lm_errf(err, LOOM_CANCELLED, "%s: interrupted", what);
    int slice = POLL_SLICE_MS;
    if (!intr) slice = 1000;
    if (deadline) {
      uint64_t now = lm_now_ms();
      if (now >= deadline) return lm_errf(err, LOOM_TIMEOUT, "%s: timed out", what);
      if (deadline - now < (uint64_t)slice) slice = (int)(deadline - now);
    }
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, slice);
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return lm_errf(err, LOOM_IO, "%s: poll: %s", what, strerror(errno));
  }
}

/* "@NAME": the abstract Unix-domain socket NAME (a worker's local socket). */
static int connect_local(const char *addr, int *out_fd, lm_err *err) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(addr + 1);
  if (n == 0 || n + 1 > sizeof sa.sun_path) return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad local address '%s'", addr);
  memcpy(sa.sun_path + 1, addr + 1, n);
  /* non-blocking: a listener whose backlog is full (a stuck worker) is refused, not waited for */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return lm_errf(err, LOOM_CONNECT, "cannot connect to %s: socket: %s", addr, strerror(errno));
  int r;
  do r = connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    return lm_errf(err, LOOM_CONNECT, "cannot connect to %s: %s", addr, strerror(e));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *out_fd = fd;
  return 0;
}

int lm_sock_connect(const char *addr, int64_t timeout_ms, lm_interrupt_fn intr, void *intr_arg, int *out_fd,
                    lm_err *err) {
  *out_fd = -1;
  if (addr && addr[0] == '@') return connect_local(addr, out_fd, err);
  struct addrinfo *ai0;
  LM_TRY(resolve_all(addr, &ai0, err));
  uint64_t deadline = timeout_ms >= 0 ? lm_now_ms() + (uint64_t)timeout_ms : 0;
  if (timeout_ms == 0) deadline = lm_now_ms(); /* zero means "try once, do not wait" */
  int rc = lm_errf(err, LOOM_CONNECT, "cannot connect to %s: no address", addr);
  for (struct addrinfo *ai = ai0; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      rc = lm_errf(err, LOOM_CONNECT, "cannot connect to %s: socket: %s", addr, strerror(errno));
      continue;
    }
    int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS) {
      lm_err werr;
      int w = wait_fd(fd, POLLOUT, deadline ? deadline + 1 : 0, intr, intr_arg, "connect", &werr);
      if (w < 0) {
        close(fd);
        freeaddrinfo(ai0);
        return lm_errf(err, w, "cannot connect to %s: %s", addr,
                       w == LOOM_TIMEOUT ? "timed out" : w == LOOM_CANCELLED ? "interrupted" : werr.msg);
      }
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      r = soerr ? -1 : 0;
      errno = soerr;
    }
    if (r < 0) {
      rc = lm_errf(err, LOOM_CONNECT, "cannot connect to %s: %s", addr, strerror(errno));
      close(fd);
      continue;
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    freeaddrinfo(ai0);
    *out_fd = fd;
    return 0;
  }
  freeaddrinfo(ai0);
  return rc;
}

int lm_sock_send_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms, lm_interrupt_fn intr,
                     void *intr_arg, lm_err *err) {
  while (iovcnt > 0) {
    if (iov->iov_len == 0) {
      iov++, iovcnt--;
      continue;
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        LM_TRY(wait_fd(fd, POLLOUT, deadline_ms, intr, intr_arg, "send", err));
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) return lm_errf(err, LOOM_CLOSED, "connection closed by the peer");
      return lm_errf(err, LOOM_IO, "send: %s", strerror(errno));
    }
    size_t left = (size_t)n;
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++, iovcnt--;
    }
    if (iovcnt > 0) {
      iov->iov_base = (char *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

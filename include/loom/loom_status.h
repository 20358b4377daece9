/* Status codes shared by the public C API and the runtime's internals.
 * One X-macro is the single list; loom_strerror() and the wire protocol both use it.
 * Codes are append-only: never renumber one, never reuse a retired number. */
#ifndef LOOM_STATUS_H
#define LOOM_STATUS_H

/*  X(NAME, value, "short description") */
#define LOOM_STATUS_LIST(X)                                                   \
  X(OK, 0, "ok")                                                              \
  X(INVALID_ARGUMENT, -1, "invalid argument")                                 \
  X(NOT_FOUND, -2, "not found")                                               \
  X(UNSUPPORTED, -3, "unsupported")                                           \
  X(NO_MEMORY, -4, "out of host memory")                                      \
  X(DEVICE_OUT_OF_MEMORY, -5, "out of device memory")                         \
  X(PARSE, -6, "parse error")                                                 \
  X(VERIFY, -7, "invalid program")                                            \
  X(IO, -8, "i/o error")                                                      \
  X(PROTOCOL, -9, "protocol error")                                           \
  X(CONNECT, -10, "cannot connect")                                           \
  X(TIMEOUT, -11, "timed out")                                                \
  X(CANCELLED, -12, "cancelled")                                              \
  X(WORKER_LOST, -13, "worker lost")                                          \
  X(INTERNAL, -14, "internal error")                                          \
  X(VERSION_MISMATCH, -15, "protocol version mismatch")                       \
  X(SHAPE_MISMATCH, -16, "shape or dtype mismatch")                           \
  X(CHECK_FAILED, -17, "check failed")                                        \
  X(CLOSED, -18, "connection closed")                                         \
  X(BUSY, -19, "busy")                                                        \
  X(PERMISSION, -20, "permission denied")                                     \
  X(PENDING, -21, "not complete yet")

typedef enum loom_status {
#define LOOM__STATUS_ENUM(name, value, desc) LOOM_##name = value,
  LOOM_STATUS_LIST(LOOM__STATUS_ENUM)
#undef LOOM__STATUS_ENUM
} loom_status;

#endif /* LOOM_STATUS_H */

/* Element types, shared by the public C API, the wire protocol and the executor.
 * Append-only: the numeric values travel on the wire and in saved files. */
#ifndef LOOM_DTYPE_H
#define LOOM_DTYPE_H

/*  X(NAME, value, MLIR spelling, numpy descr, size in bytes) */
#define LOOM_DTYPE_LIST(X)                      \
  X(PRED, 1, "i1", "|b1", 1)                    \
  X(S8, 2, "i8", "|i1", 1)                      \
  X(S16, 3, "i16", "<i2", 2)                    \
  X(S32, 4, "i32", "<i4", 4)                    \
  X(S64, 5, "i64", "<i8", 8)                    \
  X(U8, 6, "ui8", "|u1", 1)                     \
  X(U16, 7, "ui16", "<u2", 2)                   \
  X(U32, 8, "ui32", "<u4", 4)                   \
  X(U64, 9, "ui64", "<u8", 8)                   \
  X(F16, 10, "f16", "<f2", 2)                   \
  X(BF16, 11, "bf16", "bfloat16", 2)            \
  X(F32, 12, "f32", "<f4", 4)                   \
  X(F64, 13, "f64", "<f8", 8)                   \
  X(C64, 14, "complex<f32>", "<c8", 8)          \
  X(C128, 15, "complex<f64>", "<c16", 16)

typedef enum loom_dtype {
  LOOM_DTYPE_INVALID = 0,
#define LOOM__DTYPE_ENUM(name, value, mlir, npy, size) LOOM_DTYPE_##name = value,
  LOOM_DTYPE_LIST(LOOM__DTYPE_ENUM)
#undef LOOM__DTYPE_ENUM
  LOOM_DTYPE_COUNT
} loom_dtype;

#endif /* LOOM_DTYPE_H */

"""Prints the JAX (XLA CPU) reference values embedded in tests/unit/test_ops_rng.c and
tests/unit/test_ops_fft.c. Not a test itself: run it by hand with jax installed
(`python3 tests/unit/test_ops_jax_values.py`) when those tests need new cases."""
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)


def rng_cases():
    A = lax.RandomAlgorithm
    cases = [
        (A.RNG_THREE_FRY, [1, 2], (2, 2), jnp.uint64),
        (A.RNG_THREE_FRY, [1, 2], (3, 5), jnp.uint32),
        (A.RNG_THREE_FRY, [1, 2], (2, 3), jnp.uint8),
        (A.RNG_THREE_FRY, [0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], (), jnp.uint32),
        (A.RNG_THREE_FRY, [0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], (3, 2), jnp.uint16),
        (A.RNG_PHILOX, [1, 2], (3, 5), jnp.uint32),
        (A.RNG_PHILOX, [1, 2], (5,), jnp.uint64),
        (A.RNG_PHILOX, [0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], (2, 2), jnp.uint64),
        (A.RNG_PHILOX, [0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], (2, 3), jnp.uint8),
        (A.RNG_DEFAULT, [1, 2], (3,), jnp.uint32),
    ]
    for alg, state, shape, dt in cases:
        s = jnp.array(state, dtype=jnp.uint64)
        ns, out = jax.jit(lambda s: lax.rng_bit_generator(s, shape, dtype=dt, algorithm=alg))(s)
        print(alg.name, [hex(x) for x in state], shape, np.dtype(dt).name,
              list(map(int, np.asarray(ns))), list(map(int, np.asarray(out).ravel())))


def fft_cases():
    x = (np.arange(12) * 0.37 - 1.1).astype(np.float32)
    for n in (12, 5, 16):
        y = np.fft.fft(x[:n].astype(np.complex64))
        print("fft", n, [(float(v.real), float(v.imag)) for v in np.asarray(jnp.fft.fft(x[:n].astype(jnp.complex64)))])
    print("rfft 12", [(float(v.real), float(v.imag)) for v in np.asarray(jnp.fft.rfft(x))])


if __name__ == "__main__":
    rng_cases()
    fft_cases()

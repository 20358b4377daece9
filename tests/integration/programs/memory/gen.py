"""Regenerates the FSDP training step whose per-device peak memory test_memory.py checks: an
8-layer MLP (512x512 f32 weights, 1 MiB each), parameters split over the 8 devices along their
first dimension (FSDP), the batch split too; one step of SGD on a mean squared error, returning
the new parameters (split the same way) and the loss; and an argmax and a top_k over an operand
split by columns. The test needs only the checked-in text:

    python3 tests/integration/programs/memory/gen.py
"""
import os
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

LAYERS, D, BATCH = 8, 512, 64
ROWS, COLS = 256, 8192


def forward(params, x):
    for w, b in params:
        x = jnp.tanh(x @ w + b)
    return x


def step(params, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)
    return jax.tree.map(lambda p, d: p - 0.01 * d, params, g), loss


def main():
    mesh = Mesh(jax.devices(), ("d",))
    s = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    params = [(jnp.zeros((D, D), jnp.float32), jnp.zeros((D,), jnp.float32)) for _ in range(LAYERS)]
    x = jnp.zeros((BATCH, D), jnp.float32)
    psh = [(s(P("d", None)), s(P("d"))) for _ in range(LAYERS)]
    low = jax.jit(step, in_shardings=(psh, s(P("d", None)), s(P("d", None))),
                  out_shardings=(psh, s(P()))).lower(params, x, x)
    out = Path(__file__).resolve().parent / "fsdp_step_8.mlir"
    out.write_text(low.as_text())
    print("wrote", out)
    # argmax, and top_k along the split dim, of a 256x8192 f32 operand (8 MiB) split by columns:
    # each device should hold its 1 MiB block, never the whole operand
    a = jnp.zeros((ROWS, COLS), jnp.float32)
    cols = s(P(None, "d"))
    for name, f in (("argmax_cols_8", lambda v: (jnp.argmax(v, axis=1), jnp.max(v, axis=1))),
                    ("top_k_cols_8", lambda v: jax.lax.top_k(v, 4))):
        out = Path(__file__).resolve().parent / f"{name}.mlir"
        out.write_text(jax.jit(f, in_shardings=(cols,)).lower(a).as_text())
        print("wrote", out)


if __name__ == "__main__":
    main()

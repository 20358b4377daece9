"""Regenerates the FSDP training step whose per-device peak memory test_memory.py checks: an
8-layer MLP (512x512 f32 weights, 1 MiB each), parameters split over the 8 devices along their
first dimension (FSDP), the batch split too; one step of SGD on a mean squared error, returning
the new parameters (split the same way) and the loss. The test needs only the checked-in text:

    python3 tests/integration/programs/memory/gen.py
"""
import os
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

LAYERS, D, BATCH = 8, 512, 64


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


if __name__ == "__main__":
    main()

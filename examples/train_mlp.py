"""Trains an MLP data-parallel across every device of a Loom cluster, on synthetic data, and the
same training run in plain JAX on one CPU device; prints both final losses.

It is plain JAX: loom.jax.initialize() points JAX's IFRT proxy backend at the cluster (keeping
this host's CPU backend for the reference run), so jax.devices() are the cluster's devices and
the arrays are jax.Arrays. Each step is one jitted shard_map over a 1-d mesh of all devices: every device takes its slice of the
batch, computes its slice's loss, the batch's loss is their mean (pmean, an all_reduce across
workers), and the gradient of that mean (summed over devices by another all_reduce) updates
the replicated parameters with SGD; parameters stay on the cluster between steps
(replicated on every device), only the batches travel. The reference runs the same update on the
whole batch on one CPU device; with equal slices the mean of the slices' gradients is the whole
batch's gradient, so the two runs agree up to floating-point rounding.

    loom up --detach && python examples/train_mlp.py && loom down
"""
import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import loom.jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def init_params(key, sizes):
    params = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        k = jax.random.fold_in(key, i)
        params.append({"w": jax.random.normal(k, (m, n), jnp.float32) * np.float32(np.sqrt(2.0 / m)),
                       "b": jnp.zeros((n,), jnp.float32)})
    return params


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def sgd(params, grads, lr):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def synthetic_data(seed, n, d_in, d_out):
    """Inputs and targets from a fixed random 'teacher' function plus a little noise."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d_in)).astype(np.float32)
    w1 = rng.standard_normal((d_in, 32)).astype(np.float32) / np.sqrt(d_in)
    w2 = rng.standard_normal((32, d_out)).astype(np.float32) / np.sqrt(32)
    y = (np.tanh(x @ w1) @ w2 + 0.01 * rng.standard_normal((n, d_out))).astype(np.float32)
    return x, y


class Progress:
    """A one-line progress bar on stderr (a line every 10% when stderr is not a terminal)."""

    def __init__(self, total, label, width=30):
        self.total, self.label, self.width = total, label, width
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last_decile = -1

    def update(self, done, loss):
        decile = done * 10 // self.total
        if not self.tty and decile == self.last_decile and done != self.total:
            return
        self.last_decile = decile
        fill = done * self.width // self.total
        rate = done / max(time.monotonic() - self.t0, 1e-9)
        line = (f"{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total} "
                f"loss {loss:.5f} ({rate:.1f} steps/s)")
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=512, help="global batch (split over the devices)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-3, help="tolerance between Loom's and JAX's final loss")
    args = ap.parse_args()

    loom.jax.initialize(keep_cpu=True)  # jax.devices(): the cluster's; jax.devices("cpu"): this host's
    devices = jax.devices()
    n = len(devices)
    cpu0 = jax.devices("cpu")[0]
    if args.batch % n:
        sys.exit(f"train_mlp: --batch {args.batch} does not split over {n} devices")
    d_in, d_out = 16, 4
    sizes = [d_in, args.hidden, args.hidden, d_out]
    batches = 16
    x_all, y_all = synthetic_data(args.seed, batches * args.batch, d_in, d_out)
    with jax.default_device(cpu0):
        params0 = jax.device_get(init_params(jax.random.PRNGKey(args.seed), sizes))
    lr = np.float32(args.lr)
    print(f"MLP {sizes}, {args.steps} steps of SGD (lr {args.lr}), global batch {args.batch} "
          f"over {n} Loom devices ({args.batch // n} per device)")

    # Data-parallel on the cluster: a shard_map over all devices; gradients averaged with pmean.
    mesh = Mesh(np.array(devices), ("data",))

    def dp_step(params, x, y):
        # The batch's loss is the mean of the devices' losses (pmean: an all_reduce). Its gradient
        # with respect to the replicated parameters is then the same on every device: JAX's
        # shard_map autodiff sums the devices' contributions (another all_reduce).
        def batch_loss(p):
            return jax.lax.pmean(loss_fn(p, x, y), "data")

        loss, grads = jax.value_and_grad(batch_loss)(params)
        return sgd(params, grads, lr), loss

    step = jax.jit(jax.shard_map(dp_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                 out_specs=(P(), P())))
    params = jax.device_put(params0, NamedSharding(mesh, P()))
    data = NamedSharding(mesh, P("data"))

    losses = []
    bar = Progress(args.steps, "loom")
    t0 = time.monotonic()
    for i in range(args.steps):
        b = i % batches
        xb = jax.device_put(x_all[b * args.batch:(b + 1) * args.batch], data)
        yb = jax.device_put(y_all[b * args.batch:(b + 1) * args.batch], data)
        params, loss = step(params, xb, yb)
        losses.append(loss)
        if (i + 1) % 10 == 0 or i + 1 == args.steps:
            bar.update(i + 1, float(loss))  # fetching the loss waits for this step
    loom_time = time.monotonic() - t0
    loom_losses = np.array([float(v) for v in losses])

    # The same run in plain JAX on one CPU device.
    @jax.jit
    def ref_step(params, x, y):  # runs on cpu0, where its inputs are
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return sgd(params, grads, lr), loss

    ref_params = jax.device_put(params0, cpu0)
    ref_losses = []
    bar = Progress(args.steps, "jax ")
    t0 = time.monotonic()
    for i in range(args.steps):
        b = i % batches
        ref_params, loss = ref_step(ref_params, jax.device_put(x_all[b * args.batch:(b + 1) * args.batch], cpu0),
                                    jax.device_put(y_all[b * args.batch:(b + 1) * args.batch], cpu0))
        ref_losses.append(loss)
        if (i + 1) % 10 == 0 or i + 1 == args.steps:
            bar.update(i + 1, float(loss))
    jax_time = time.monotonic() - t0
    ref_losses = np.array([float(v) for v in ref_losses])

    first, final, ref_final = loom_losses[0], loom_losses[-1], ref_losses[-1]
    k = max(1, args.steps // 10)
    decreasing = loom_losses[-k:].mean() < loom_losses[:k].mean()
    close = abs(final - ref_final) <= args.rtol * abs(ref_final) + 1e-6
    print(f"Loom ({n} devices): loss {first:.6f} -> {final:.6f} in {loom_time:.2f} s")
    print(f"JAX (1 CPU device): loss {ref_losses[0]:.6f} -> {ref_final:.6f} in {jax_time:.2f} s")
    print(f"final loss difference {abs(final - ref_final):.2e} (tolerance {args.rtol:g} relative): "
          f"{'match' if close else 'MISMATCH'}; loss {'decreased' if decreasing else 'DID NOT DECREASE'}")
    return 0 if close and decreasing else 1


if __name__ == "__main__":
    sys.exit(main())

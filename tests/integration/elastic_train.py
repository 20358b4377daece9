"""A small data-parallel training loop on a Loom cluster, for the elastic recovery tests and
bench/bench_recovery.py: an MLP trained with SGD, one shard_map step per batch over every device
(batch split over devices, gradients averaged with pmean, parameters replicated). Optionally it
sends a signal to a worker process at a given step (while launches are in flight), and resumes a
stopped one later. Writes the final parameters (.npz) and, with --times, each step's completion
time (so the recovery's cost can be measured).

    LOOM_CONTROLLER=HOST:PORT python elastic_train.py --steps 200 --out params.npz \
        [--kill-pid PID --kill-step K [--kill-signal STOP --cont-after 2.0]] [--drain-worker W --drain-step K]
"""
import argparse
import json
import os
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import loom.jax
from loom.jax import P


def init_params(rng, sizes):
    return [{"w": (rng.standard_normal((m, n)) * np.sqrt(2.0 / m)).astype(np.float32),
             "b": np.zeros((n,), np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kill-pid", type=int, default=0)
    ap.add_argument("--kill-step", type=int, default=-1)
    ap.add_argument("--kill-signal", default="KILL")
    ap.add_argument("--cont-after", type=float, default=0.0, help="SIGCONT the stopped process after this many s")
    ap.add_argument("--kill2-pid", type=int, default=0, help="a second process to SIGKILL ...")
    ap.add_argument("--kill2-step", type=int, default=-1, help="... at this step")
    ap.add_argument("--drain-worker", type=int, default=-1, help="`loom drain` this worker id (another session) ...")
    ap.add_argument("--drain-step", type=int, default=-1, help="... at this step, while launches are in flight")
    ap.add_argument("--save-step", type=int, default=-1, help="checkpoint the parameters after this step ...")
    ap.add_argument("--save-name", default="train", help="... under this name (Client.checkpoint_save)")
    ap.add_argument("--resume", help="start from this checkpoint's parameters ...")
    ap.add_argument("--resume-step", type=int, default=-1, help="... saved after this step (run the steps after it)")
    ap.add_argument("--times", help="write each step's completion time (monotonic s) as JSON here")
    ap.add_argument("--sync-every", type=int, default=1, help="wait for the loss every N steps")
    args = ap.parse_args()

    client = loom.jax.initialize(patch_jax=False)
    n = client.device_count()
    d_in, d_out = 16, 4
    sizes = [d_in, args.hidden, args.hidden, d_out]
    rng = np.random.default_rng(args.seed)
    nb = 8
    x_all = rng.standard_normal((nb * args.batch, d_in)).astype(np.float32)
    w_true = rng.standard_normal((d_in, d_out)).astype(np.float32)
    y_all = np.tanh(x_all @ w_true).astype(np.float32)
    params0 = init_params(rng, sizes)
    lr = np.float32(0.05)
    mesh = loom.jax.make_mesh((n,), ("data",))

    def dp_step(params, x, y):
        def batch_loss(p):
            return jax.lax.pmean(jnp.mean((mlp(p, x) - y) ** 2), "data")

        loss, grads = jax.value_and_grad(batch_loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    step = loom.jax.shard_map(dp_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
    replicated = loom.jax.NamedSharding(mesh, P())
    data = loom.jax.NamedSharding(mesh, P("data"))
    params = jax.tree_util.tree_map(lambda a: loom.jax.put(a, replicated), params0)
    first = 0
    if args.resume:  # the parameters as saved (their saved sharding: replicated over every device)
        got = client.checkpoint_load(args.resume, expect={f"{k}{i}": (params0[i][k].shape, np.float32)
                                                          for i in range(len(params0)) for k in ("w", "b")})
        params = [{k: got[f"{k}{i}"] for k in ("w", "b")} for i in range(len(params0))]
        first = args.resume_step + 1
        print(f"resumed from checkpoint {args.resume} after step {args.resume_step}", flush=True)
    times = []
    sig = getattr(signal, "SIG" + args.kill_signal)
    t0 = time.monotonic()
    pending = []
    for i in range(first, args.steps):
        b = i % nb
        xb = loom.jax.put(x_all[b * args.batch:(b + 1) * args.batch], data)
        yb = loom.jax.put(y_all[b * args.batch:(b + 1) * args.batch], data)
        params, loss = step(params, xb, yb)
        pending.append((i, loss))
        if i == args.kill_step and args.kill_pid:
            os.kill(args.kill_pid, sig)
            print(f"step {i}: sent SIG{args.kill_signal} to {args.kill_pid} at {time.monotonic() - t0:.3f} s",
                  flush=True)
            if args.cont_after > 0:
                threading.Timer(args.cont_after, os.kill, (args.kill_pid, signal.SIGCONT)).start()
        if i == args.save_step:
            r = client.checkpoint_save(args.save_name, {f"{k}{n}": params[n][k] for n in range(len(params))
                                                        for k in ("w", "b")})
            print(f"step {i}: saved checkpoint {args.save_name}: {r['files']} files, {r['bytes']} bytes", flush=True)
        if i == args.drain_step and args.drain_worker >= 0:  # from another session, as an operator would
            def drain(step=i):
                with loom.connect(name="drain") as admin:
                    for attempt in range(100):  # BUSY (a program loading, a recovery): try again, as an operator would
                        try:
                            print(f"step {step}: drained {admin.drain(args.drain_worker)}", flush=True)
                            return
                        except loom.BusyError as e:
                            print(f"step {step}: drain busy ({e}); trying again", flush=True)
                            time.sleep(0.1)
            drainer = threading.Thread(target=drain)
            drainer.start()
        if i == args.kill2_step and args.kill2_pid:
            os.kill(args.kill2_pid, signal.SIGKILL)
            print(f"step {i}: sent SIGKILL to {args.kill2_pid} at {time.monotonic() - t0:.3f} s", flush=True)
        if (i + 1) % args.sync_every == 0 or i + 1 == args.steps:
            for j, lv in pending:
                float(np.asarray(lv))  # waits for step j
                times.append((j, time.monotonic() - t0))
            pending = []
    if args.drain_step >= 0 and args.drain_worker >= 0:
        drainer.join()
    final = jax.tree_util.tree_map(lambda a: np.asarray(a), params)
    flat = {f"{k}{i}": final[i][k] for i in range(len(final)) for k in ("w", "b")}
    np.savez(args.out, **flat)
    if args.times:
        with open(args.times, "w") as f:
            json.dump(times, f)
    print(f"done {args.steps} steps in {time.monotonic() - t0:.2f} s, final loss {float(np.asarray(loss)):.6f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

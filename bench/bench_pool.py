"""Device utilization of a shared pool with 1, 4, 8 and 16 concurrent clients, beside a plain
FIFO run of the same clients, and the time a high-priority session waits for preemption.

Starts a local cluster (`loom up --detach`: 2 workers x 4 CPU devices) in a private state
directory. Every client is its own process issuing small programs one at a time (launch, wait
for the result, launch again: a step loop with a host dependency), each a 2-device program that
spins K iterations per device. Two ways to share the 8 devices, same clients, same run:

  pool  each client is a stream of jobs: a pool session asking for 2 devices (priority batch),
        --job launches, close; the controller admits 4 jobs at a time and queues the rest
        (docs/pool.md);
  fifo  plain first come, first served: every client runs at once in a shared session, its
        launches on the device pair (client i mod 4), interleaved on each device in arrival order.

Utilization = device-launches per second (launches x 2 devices) / the highest rate any
configuration reached in the same run: 100% is the most these 8 CPU devices delivered on this
machine. On a machine with fewer cores than devices the devices share the cores (and the client
processes take their part), so compute, not placement, bounds the rates there; the absolute
rates are printed too.

Then, with 16 batch clients in the pool, a prod session asking for 2 devices connects: the time
until it is admitted (it preempts a batch job), beside a batch session asking the same (it waits
its turn in the queue).

Last, the time a preempted session takes to resume: a batch session (devices 0,1) holding one
array, preempted by a prod session while interactive sessions fill the other 6 devices, resumes
either on its own devices (the prod session closes) or on other devices while prod keeps its own
(an interactive session closes: devices 2,3 on the same worker, or 4,5 on the other worker, the
shards then crossing the data plane). Timed from the devices being freed to the completion of a
launch it had issued while suspended (a sum over the array): the shards back (STASH restore) or
moved (SHARD_MOVE), the program loaded on the new devices, the launch run. Small and large arrays.

    python3 bench/bench_pool.py [--seconds 4] [--iters 10000] [--job 20] [--resume-only]
"""
import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = BUILD / "bin" / "loom"
sys.path.insert(0, str(BUILD / "python"))

PATHWAYS = ("Pathways paper (Barham et al., MLSys 2022), multi-tenancy, as issue 14 summarizes it: one client "
            "cannot saturate the pool; with 4 to 16 clients the devices reach ~100% utilization (programs of "
            "different clients interleave on the same devices).")


def spin(nd, k):
    return f"""module @spin attributes {{mhlo.num_partitions = {nd} : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["d"={nd}]>
  func.func public @main() -> tensor<{nd}xi64> {{
    %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} () {{
      %zero = stablehlo.constant dense<0> : tensor<i64>
      %one = stablehlo.constant dense<1> : tensor<i64>
      %n = stablehlo.constant dense<{k}> : tensor<i64>
      %r = stablehlo.while(%i = %zero) : tensor<i64>
        cond {{
          %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
          stablehlo.return %c : tensor<i1>
        }} do {{
          %j = stablehlo.add %i, %one : tensor<i64>
          stablehlo.return %j : tensor<i64>
        }}
      %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<i64>) -> tensor<1xi64>
      sdy.return %b : tensor<1xi64>
    }} : () -> tensor<{nd}xi64>
    return %0 : tensor<{nd}xi64>
  }}
}}"""


def client(mode, idx, args, start_at, q):
    """One client process: returns (launches completed, jobs) through q."""
    import loom
    prog = spin(2, args.iters)
    while time.time() < start_at:
        time.sleep(0.005)
    end = start_at + args.seconds
    n = jobs = 0
    if mode == "fifo":
        c = loom.connect(name=f"fifo-{idx}")
        exe = c.compile(prog, devices=[2 * (idx % 4), 2 * (idx % 4) + 1])
        while time.time() < end:
            exe.launch()[1].result(timeout=120)
            n += 1
        c.close()
    else:
        while time.time() < end:
            c = loom.connect(devices=2, priority="batch", name=f"pool-{idx}", progress=False)
            exe = c.compile(prog)
            for _ in range(args.job):
                if time.time() >= end:
                    break
                exe.launch()[1].result(timeout=120)
                n += 1
            c.close()
            jobs += 1
    q.put((n, jobs))


def run_clients(mode, nclients, args):
    q = mp.Queue()
    start_at = time.time() + 1.0 + 0.15 * nclients  # every process forked and ready
    ps = [mp.Process(target=client, args=(mode, i, args, start_at, q)) for i in range(nclients)]
    for p in ps:
        p.start()
    res = [q.get(timeout=args.seconds + 120) for _ in ps]
    for p in ps:
        p.join(30)
    return sum(r[0] for r in res), sum(r[1] for r in res)


def preempt_wait(args):
    """16 batch pool clients busy; then a prod and a batch session each ask for 2 devices."""
    import loom
    q = mp.Queue()
    start_at = time.time() + 3.5
    a2 = argparse.Namespace(**vars(args))
    a2.seconds = args.seconds + 6
    ps = [mp.Process(target=client, args=("pool", i, a2, start_at, q)) for i in range(16)]
    for p in ps:
        p.start()
    time.sleep(3.5 + 2.0)  # the pool is full and 12 jobs wait
    out = {}
    for cls in ("prod", "batch"):
        t0 = time.perf_counter()
        c = loom.connect(devices=2, priority=cls, name=f"probe-{cls}", progress=False, timeout=120)
        out[cls] = (time.perf_counter() - t0) * 1000
        c.close()
    for _ in ps:
        q.get(timeout=a2.seconds + 120)
    for p in ps:
        p.join(30)
    return out


def sum_program(n):
    h = n // 2
    return f"""module @sum2 attributes {{mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["d"=2]>
  func.func public @main(%x: tensor<{n}xf32>) -> tensor<2xf32> {{
    %0 = sdy.manual_computation(%x) in_shardings=[<@mesh, [{{"d"}}]>] out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} (%a: tensor<{h}xf32>) {{
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %t = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{h}xf32>, tensor<f32>) -> tensor<f32>
      %b = stablehlo.broadcast_in_dim %t, dims = [] : (tensor<f32>) -> tensor<1xf32>
      sdy.return %b : tensor<1xf32>
    }} : (tensor<{n}xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }}
}}"""


def resume_time(where, nbytes):
    """ms from the devices being freed to the completion of the launch the preempted session issued while
    suspended; where: "own", "same worker", "other worker"."""
    import threading
    import loom
    import numpy as np
    n = max(2, nbytes // 4 // 2 * 2)
    sh = loom.Sharding.named(np.arange(2), ("d",), ("d",))
    b = loom.connect(devices=2, priority="batch", name="victim", progress=False, timeout=300)
    fill = [loom.connect(devices=2, priority="interactive", name=f"fill{i}", progress=False, timeout=300)
            for i in range(3)]  # devices 2,3 (worker 0), 4,5 and 6,7 (worker 1)
    exe = b.compile(sum_program(n))
    x = b.put(np.ones(n, np.float32), sharding=sh)
    x.block_until_ready(timeout=300)
    (y,), f = exe.launch(x)
    f.result(timeout=300)
    p = loom.connect(devices=2, priority="prod", name="urgent", progress=False, timeout=300)
    done = {}

    def held():
        (z,), fz = exe.launch(x)
        fz.result(timeout=300)
        done["t"] = time.perf_counter()
        done["v"] = z.numpy()

    t = threading.Thread(target=held)
    t.start()
    time.sleep(0.3)  # the launch is held at the controller
    t0 = time.perf_counter()
    if where == "own":
        p.close()
    else:
        fill[0 if where == "same worker" else 1].close()
    t.join(300)
    ms = (done["t"] - t0) * 1000
    assert float(done["v"].sum()) == n, done["v"]
    b.close()
    for c in fill:
        c.close()
    if where != "own":
        p.close()
    return ms


def resume_rows(reps=3):
    import statistics
    out = {}
    for nbytes in (4 << 10, 64 << 20):
        for where in ("own", "same worker", "other worker"):
            out[nbytes, where] = statistics.median(resume_time(where, nbytes) for _ in range(reps))
    return out


def print_resume():
    r = resume_rows()
    print("a preempted batch session resuming (median of 3; from its devices freed to its held launch done):")
    print(f"{'array':>8}  {'own devices':>11}  {'other, same worker':>18}  {'other, other worker':>19}")
    for nbytes in (4 << 10, 64 << 20):
        label = f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
        print(f"{label:>8}  {r[nbytes, 'own']:>9.1f}ms  {r[nbytes, 'same worker']:>16.1f}ms  "
              f"{r[nbytes, 'other worker']:>17.1f}ms")


def main():
    ap = argparse.ArgumentParser(description="Device utilization of the shared pool with 1/4/8/16 clients beside a "
                                 "plain FIFO run, and the wait of a high-priority session for preemption.")
    ap.add_argument("--seconds", type=float, default=4.0, help="measured time per configuration (default 4)")
    ap.add_argument("--iters", type=int, default=10000, help="spin iterations per device per launch (default 10000)")
    ap.add_argument("--job", type=int, default=20, help="pool: launches per job (session) (default 20)")
    ap.add_argument("--resume-only", action="store_true", help="only the resume times (own vs other devices)")
    args = ap.parse_args()
    import loom  # noqa: F401 (imported once here: the forked clients inherit it)
    state = tempfile.mkdtemp(prefix="loom-bench-pool-")
    os.environ["LOOM_STATE_DIR"] = state
    os.environ.pop("LOOM_CONTROLLER", None)
    subprocess.run([str(LOOM), "up", "--detach", "--proxy-port", "0"], check=True, stdout=subprocess.DEVNULL)
    try:
        if args.resume_only:
            print_resume()
            return
        rows = {}
        for n in (1, 4, 8, 16):
            for mode in ("pool", "fifo"):
                launches, jobs = run_clients(mode, n, args)
                rows[n, mode] = (launches / args.seconds, jobs)
        best = max(r[0] for r in rows.values())
        print(f"2 workers x 4 CPU devices on {os.cpu_count()} cores; clients issue 2-device programs of {args.iters} "
              f"spin iterations per device, one at a time; {args.seconds:g} s per configuration")
        print(f"100% = {2 * best:.1f} device-launches/s, the highest rate of this run")
        print(f"{'clients':>7}  {'pool util':>9}  {'pool launches/s':>15}  {'jobs':>5}  {'fifo util':>9}  "
              f"{'fifo launches/s':>15}")
        for n in (1, 4, 8, 16):
            p, f = rows[n, "pool"], rows[n, "fifo"]
            print(f"{n:>7}  {100 * p[0] / best:>8.1f}%  {p[0]:>15.1f}  {p[1]:>5}  {100 * f[0] / best:>8.1f}%  "
                  f"{f[0]:>15.1f}")
        w = preempt_wait(args)
        print(f"with 16 batch clients in the pool: a prod session waited {w['prod']:.0f} ms to be admitted "
              f"(preempting a batch job); a batch session waited {w['batch']:.0f} ms (its turn in the queue)")
        print(PATHWAYS)
        print_resume()
    finally:
        subprocess.run([str(LOOM), "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()

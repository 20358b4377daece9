"""The shared pool under a long load (docs/pool.md): 32 sessions at once, half plain and half
time-sharing pool sessions, each chaining 1,000 launches, finish with exact results (no deadlock,
no launch lost), and the controller's and workers' memory comes back to where it was: rounds of
the same load after a warm-up round leave their resident memory where the warm-up left it."""
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import Cluster, loom_package

loom, _SKIP = loom_package()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

ADD_ONE_4 = (Path(__file__).parent / "programs" / "add_one_4.mlir").read_text()  # i32[8] + 1 over 4 devices
SESSIONS = 32
LAUNCHES = 1000
WINDOW = 32  # launches a session keeps in flight


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def session(addr, k, launches, errors):
    try:
        pool = k % 2 == 1
        cl = (loom.connect(addr, devices=4, weight=1 + k % 3, name=f"soak{k}", progress=False) if pool
              else loom.connect(addr, name=f"soak{k}"))
        try:
            exe = cl.compile(ADD_ONE_4)
            x0 = np.arange(8, dtype=np.int32) * (k + 1)
            x = cl.put(x0, loom.Sharding.tiled(exe.devices, 0))
            futs = []
            for i in range(launches):
                (y,), fut = exe.launch(x)
                x.delete()
                x = y
                futs.append(fut)
                if len(futs) >= WINDOW:
                    futs.pop(0).result(timeout=120)
            for f in futs:
                f.result(timeout=120)
            got = x.numpy()
            if not np.array_equal(got, x0 + launches):
                errors.append(f"session {k}: {got} != {x0 + launches}")
        finally:
            cl.close()
    except Exception as e:  # noqa: BLE001 (reported below)
        errors.append(f"session {k}: {type(e).__name__}: {e}")


def load_round(addr, launches):
    errors = []
    ts = [threading.Thread(target=session, args=(addr, k, launches, errors), daemon=True) for k in range(SESSIONS)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    assert not any(t.is_alive() for t in ts), "sessions still running after 600 s: a deadlock?"
    assert not errors, errors[:5]
    return time.monotonic() - t0


def test_32_sessions_x_1000_launches_no_leak_no_deadlock(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller()
    for _ in range(2):
        c.start_worker(4)
    c.wait_devices(8)
    pids = {"controller": c.controller.pid, **{f"worker{i}": w.pid for i, w in enumerate(c.workers)}}

    def settled_rss():
        time.sleep(1.5)  # the controller forgets closed sessions' launches on its next ticks
        return {n: rss_kib(p) for n, p in pids.items()}

    # warm-up: the allocators' pools, the connection tables, and the controller's launch log (a
    # ring of 65,536 launches, each entry with its own small allocations) filled once around
    load_round(c.addr, 65536 // SESSIONS + 100)
    base = settled_rss()
    times, after = [], []
    for _ in range(2):
        times.append(load_round(c.addr, LAUNCHES))
        after.append(settled_rss())
    rate = SESSIONS * LAUNCHES / min(times)
    print(f"{SESSIONS} sessions x {LAUNCHES} launches: {min(times):.1f} s ({rate:.0f} launches/s); "
          f"RSS KiB warm {base}, after each round {after}")
    # A leak of even 100 bytes a launch grows a process by 3 MiB a round; the allocators' own
    # slack is smaller than that once warm. The second round must not grow past the first.
    for n in pids:
        assert after[1][n] - base[n] <= 8 * 1024, (n, base[n], after)
        assert after[1][n] - after[0][n] <= 3 * 1024, (n, base[n], after)
    assert c.controller.poll() is None and all(w.poll() is None for w in c.workers)

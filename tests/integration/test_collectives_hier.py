"""The hierarchical all_reduce on real `loom worker` processes: four workers x 1 device, labelled
as hosts through LOOM_DP_HOST (2 x 2, 3 + 1, 4 x 1) with LOOM_DP_COLL=hier, against the same
launch on a flat cluster (LOOM_DP_COLL=flat): int32 sums (wrapping) and max bitwise equal, f32
sums within rounding and bitwise equal from one launch to the next on the same layout."""
import os
import signal

import numpy as np

from conftest import Cluster
from dist import PROGRAMS, loom_run

PROGRAM = PROGRAMS / "allreduce_4.mlir"


def inputs():
    rng = np.random.default_rng(16)
    t = rng.integers(-2**31, 2**31, (4, 5), dtype=np.int64).astype(np.int32)
    a = rng.integers(-2**31, 2**31, (4, 100000), dtype=np.int64).astype(np.int32)  # sums wrap
    f = (rng.standard_normal((4, 100000)) * 10.0 ** rng.integers(-3, 4, (4, 100000))).astype(np.float32)
    return [t, a, f]


def run_layout(procs, tmp_path, mode, hosts):
    """Starts a controller and four 1-device workers with the given labels, runs PROGRAM twice,
    stops the cluster; returns the two launches' results."""
    d = tmp_path / f"{mode}-{'-'.join(h or '' for h in hosts)}"
    d.mkdir()
    c = Cluster(procs, d)  # its own address file
    c.start_controller()
    workers = []
    for i, h in enumerate(hosts):
        env = dict(os.environ, LOOM_DP_COLL=mode)
        if h:
            env["LOOM_DP_HOST"] = h
        workers.append(procs.start(["worker", "--controller", c.addr, "--devices", "1"], f"{mode}-{h}-worker{i}",
                                   env=env))
        c.wait_devices(i + 1)
    out = []
    for _ in range(2):
        r, res = loom_run(c.addr, PROGRAM, inputs=inputs(), tmp=d)
        assert r.returncode == 0, r.stderr
        out.append(res)
    for p in [*workers, c.controller]:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
    return out


def test_hierarchical_matches_flat(procs, tmp_path):
    t, a, f = inputs()
    flat = run_layout(procs, tmp_path, "flat", [None] * 4)
    want_t = t.sum(axis=0, dtype=np.int64).astype(np.int32)  # wrap-around as int32
    want_a = a.sum(axis=0, dtype=np.int64).astype(np.int32)
    for res in flat:
        np.testing.assert_array_equal(res[0], np.broadcast_to(want_t, (4, 5)))
        np.testing.assert_array_equal(res[1], np.broadcast_to(want_a, (4, 100000)))
        np.testing.assert_array_equal(res[3], np.broadcast_to(a.max(axis=0), (4, 100000)))
    exact = f.astype(np.float64).sum(axis=0)
    tol = 4 * 6e-8 * np.abs(f.astype(np.float64)).sum(axis=0) + 1e-30
    for hosts in (["a", "a", "b", "b"], ["a", "a", "a", "b"], ["a", "b", "c", "d"]):
        hier = run_layout(procs, tmp_path, "hier", hosts)
        for res in hier:
            for k in (0, 1, 3):  # integers: bitwise the flat results
                assert res[k].tobytes() == flat[0][k].tobytes(), (hosts, k)
            assert np.all(np.abs(res[2] - exact) <= tol), hosts
            assert np.all(np.abs(res[2] - flat[0][2]) <= 2 * tol), hosts
            for m in range(1, 4):  # every member holds the same bits
                assert res[2][m].tobytes() == res[2][0].tobytes(), (hosts, m)
        assert hier[0][2].tobytes() == hier[1][2].tobytes(), hosts  # the same layout, the same bits

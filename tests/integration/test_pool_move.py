"""A preempted pool session resumes on whatever devices are free, not only its own (docs/pool.md
"Preemption"): its shards move from the host memory STASH put them in to the new devices (within
a worker, or to another worker over the data plane: SHARD_MOVE), its programs are loaded there,
and its held launches run. Its client sees no error; its results are bitwise those of an
undisturbed run. Real controller and worker processes."""
import json
import time

import numpy as np
import pytest

from conftest import Cluster, loom_package, run_loom, wait_for
from loomtest import Chain, chain_value

loom, _SKIP = loom_package()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

# one step of a chain on 2 devices: elementwise work on each half, then an all-reduce of the two
# halves' sums added back (a collective: the program's mesh must be right on the new devices)
STEP_2 = """
module @step2 attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=2]>
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"d"}]>] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} (%a: tensor<4xf32>) {
      %c = stablehlo.constant dense<0.9999> : tensor<4xf32>
      %m = stablehlo.multiply %a, %c : tensor<4xf32>
      %s = stablehlo.sine %a : tensor<4xf32>
      %r = stablehlo.add %m, %s : tensor<4xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %t = stablehlo.reduce(%r init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
      %g = "stablehlo.all_reduce"(%t) ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %u = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %u : tensor<f32>
      }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<f32>) -> tensor<f32>
      %k = stablehlo.constant dense<0.001> : tensor<f32>
      %gk = stablehlo.multiply %g, %k : tensor<f32>
      %b = stablehlo.broadcast_in_dim %gk, dims = [] : (tensor<f32>) -> tensor<4xf32>
      %o = stablehlo.add %r, %b : tensor<4xf32>
      sdy.return %o : tensor<4xf32>
    } : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


def sessions(addr):
    r = run_loom("sessions", "--json", "--controller", addr, check=True)
    return {x["session"]: x for x in json.loads(r.stdout)["sessions"]}


@pytest.mark.parametrize("layout", ["one_worker", "two_workers"])
def test_a_preempted_session_resumes_on_other_devices_bitwise(procs, tmp_path, layout):
    """batch (devices 0,1) and interactive (2,3) run; prod takes batch's devices; when interactive
    closes, batch resumes on 2,3 while prod still holds 0,1: within one worker (one_worker: 4
    devices) or on the other worker (two_workers: 2 x 2 devices, the shards cross the data plane).
    batch's chain of launches sees no error and ends bitwise where an undisturbed chain does; a
    second array it put before the preemption reads back bitwise from its new devices."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    if layout == "one_worker":
        c.start_worker(4)
    else:
        c.start_worker(2)
        c.start_worker(2)
    c.wait_devices(4)
    sh = loom.Sharding.named(np.arange(2), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.31 + 0.25
    other = np.random.default_rng(3).standard_normal(8).astype(np.float32)
    b = loom.connect(c.addr, devices=2, priority="batch", name="victim", progress=False, timeout=120)
    m = loom.connect(c.addr, devices=2, priority="interactive", name="middle", progress=False, timeout=120)
    st = sessions(c.addr)
    assert st[b.session]["device_ids"] == [0, 1] and st[m.session]["device_ids"] == [2, 3], st
    exe = b.compile(STEP_2)
    kept = b.put(other, sharding=sh)
    kept.block_until_ready(timeout=60)
    state = Chain(b, exe, x0, sh)
    t = state.thread
    wait_for(lambda: state["n"] >= 5, 30, what="the batch chain running")
    p = loom.connect(c.addr, devices=2, priority="prod", name="urgent", progress=False, timeout=60)
    st = sessions(c.addr)
    assert st[b.session]["state"] == "suspended", st
    assert st[p.session]["device_ids"] == [0, 1], st
    n_at = state["n"]
    time.sleep(0.5)
    assert state["n"] <= n_at + 1  # held while suspended
    t0 = time.monotonic()
    m.close()
    wait_for(lambda: state["n"] >= n_at + 5, 60, what="the batch chain resumed on other devices")
    resumed_s = time.monotonic() - t0
    st = sessions(c.addr)
    assert st[b.session]["state"] == "running" and st[b.session]["device_ids"] == [2, 3], st
    assert st[b.session]["moves"] == 1 and st[b.session]["suspensions"] == 1, st
    assert st[p.session]["state"] == "running" and st[p.session]["device_ids"] == [0, 1], st
    # prod runs on its devices beside it
    pe = p.compile(STEP_2)
    (py,), pf = pe.launch(p.put(x0, sharding=sh))
    pf.result(timeout=60)
    prod_out = py.numpy()
    assert kept.numpy().tobytes() == other.tobytes()
    state["stop"] = True
    t.join(60)
    assert state["err"] is None, state["err"]
    count = state["n"]
    wait_for(lambda: any("moved to other devices" in procs.log(w) for w in c.workers), 10,
             what="the workers' move log")
    b.close()
    p.close()
    ref = loom.connect(c.addr, devices=2, progress=False, timeout=60)
    e2 = ref.compile(STEP_2)
    assert state["x"].tobytes() == chain_value(ref, e2, x0, sh, count)
    assert prod_out.tobytes() == chain_value(ref, e2, x0, sh, 1)
    ref.close()
    print(f"{layout}: resumed on other devices {resumed_s * 1000:.0f} ms after the devices were free (5 launches "
          f"included); chain of {count} launches bitwise equal")


def test_a_sharing_group_resumes_on_other_devices_together(procs, tmp_path):
    """Two batch sessions time-sharing devices 0,1 (weights 1 and 2), each in a chain of launches,
    are suspended together for prod; when the interactive session on the other worker's devices
    2,3 closes, they resume there together (their shards over the data plane) while prod keeps 0,1,
    go on sharing those devices, and each chain ends bitwise where an undisturbed one does."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(2)
    c.start_worker(2)
    c.wait_devices(4)
    sh = loom.Sharding.named(np.arange(2), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.37 + 0.5
    runs = []
    for w in (1, 2):
        cl = loom.connect(c.addr, devices=2, weight=w, priority="batch", progress=False, timeout=120)
        runs.append(Chain(cl, cl.compile(STEP_2), x0, sh, start=False))
    m = loom.connect(c.addr, devices=2, priority="interactive", progress=False, timeout=120)
    st = sessions(c.addr)
    assert [st[r["cl"].session]["device_ids"] for r in runs] == [[0, 1], [0, 1]] and st[m.session]["device_ids"] == [2, 3]
    ts = [r.thread for r in runs]
    for t in ts:
        t.start()
    wait_for(lambda: all(r["n"] >= 5 for r in runs), 30, what="both sharing chains running")
    p = loom.connect(c.addr, devices=2, priority="prod", name="urgent", progress=False, timeout=60)
    st = sessions(c.addr)
    assert [st[r["cl"].session]["state"] for r in runs] == ["suspended", "suspended"], st
    at = [r["n"] for r in runs]
    time.sleep(0.5)
    assert all(r["n"] <= a + 1 for r, a in zip(runs, at))  # held while suspended
    m.close()
    wait_for(lambda: all(r["n"] >= a + 5 for r, a in zip(runs, at)), 60, what="both chains resumed elsewhere")
    st = sessions(c.addr)
    for r in runs:
        s = st[r["cl"].session]
        assert s["state"] == "running" and s["device_ids"] == [2, 3] and s["moves"] == 1, st
    assert st[p.session]["device_ids"] == [0, 1], st
    for r in runs:
        r["stop"] = True
    for t in ts:
        t.join(60)
    assert [r["err"] for r in runs] == [None, None], [r["err"] for r in runs]
    for r in runs:
        r["cl"].close()
    p.close()
    ref = loom.connect(c.addr, devices=2, progress=False)
    e2 = ref.compile(STEP_2)
    for r in runs:
        assert r["x"].tobytes() == chain_value(ref, e2, x0, sh, r["n"])
    ref.close()


@pytest.mark.parametrize("then", ["rejoins", "moves"])
def test_part_of_a_sharing_group_is_preempted(procs, tmp_path, then):
    """A batch session time-sharing devices 2,3 (weight 1) is preempted alone when an interactive
    session joins its group: the interactive one runs there by itself. Then either the interactive
    session closes and batch rejoins the devices (rejoins), or the exclusive session on 0,1 closes
    and batch resumes there while interactive keeps 2,3 (moves). No error, bitwise results."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4)
    c.wait_devices(4)
    sh = loom.Sharding.named(np.arange(2), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.29 + 0.75
    f = loom.connect(c.addr, devices=2, priority="interactive", name="filler", progress=False, timeout=120)
    b = loom.connect(c.addr, devices=2, weight=1, priority="batch", name="victim", progress=False, timeout=120)
    exe = b.compile(STEP_2)
    state = Chain(b, exe, x0, sh)
    t = state.thread
    wait_for(lambda: state["n"] >= 5, 30, what="the batch chain running")
    i = loom.connect(c.addr, devices=2, weight=1, priority="interactive", name="joiner", progress=False, timeout=60)
    wait_for(lambda: sessions(c.addr)[b.session]["state"] == "suspended", 10, what="batch suspended in its group")
    st = sessions(c.addr)
    assert st[i.session]["state"] == "running" and st[i.session]["device_ids"] == [2, 3], st
    assert st[b.session]["device_ids"] == [2, 3] and st[b.session]["suspensions"] == 1, st
    ie = i.compile(STEP_2)
    xi = i.put(x0, sharding=sh)
    for _ in range(3):
        (xi,), fi = ie.launch(xi)
        fi.result(timeout=60)
    n_at = state["n"]
    time.sleep(0.5)
    assert state["n"] <= n_at + 1  # held while suspended
    if then == "rejoins":
        i_out = xi.numpy()
        i.close()
    else:
        f.close()
    wait_for(lambda: state["n"] >= n_at + 5, 60, what="the batch chain resumed")
    st = sessions(c.addr)
    assert st[b.session]["state"] == "running", st
    assert st[b.session]["device_ids"] == ([2, 3] if then == "rejoins" else [0, 1]), st
    assert st[b.session]["moves"] == (0 if then == "rejoins" else 1), st
    if then == "moves":  # the interactive one runs on beside it
        assert st[i.session]["device_ids"] == [2, 3]
        (xi,), fi = ie.launch(xi)
        fi.result(timeout=60)
        i_out = xi.numpy()
        i.close()
    state["stop"] = True
    t.join(60)
    assert state["err"] is None, state["err"]
    count = state["n"]
    b.close()
    if then == "rejoins":
        f.close()
    ref = loom.connect(c.addr, devices=2, progress=False, timeout=60)
    e2 = ref.compile(STEP_2)
    assert state["x"].tobytes() == chain_value(ref, e2, x0, sh, count)
    assert i_out.tobytes() == chain_value(ref, e2, x0, sh, 3 if then == "rejoins" else 4)
    ref.close()

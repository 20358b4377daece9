"""The loom package's client API against a real local cluster (2 workers x 4 devices): devices,
put/get of every dtype and sharding, hand-written StableHLO programs, futures, errors, cancelling
launches and Ctrl-C in a client (which cancels what it waited for), and the cleanup of a session
whose client process dies."""
import gc
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import loom
from conftest import python_script, wait_for

ADD = """
module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""

REPLICA_SUM = """
module @psum attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 8 : i32} {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
"""

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128"]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bfloat16":
        import ml_dtypes
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def test_devices(client, cluster):
    devs = client.devices()
    assert [d.id for d in devs] == list(range(8))
    workers = {d.worker_id for d in devs}
    assert len(workers) == 2
    for w in workers:
        assert sorted(d.local_index for d in devs if d.worker_id == w) == [0, 1, 2, 3]
    for d in devs:
        assert d.kind == "cpu" and d.slice and d.healthy and d.memory_capacity > 0
        r = repr(d)
        assert f"id={d.id}" in r and f"worker={d.worker_id}" in r and f"slice={d.slice}" in r
    assert client.device_count() == 8
    assert f"{len(devs)} devices" in repr(client)
    cli = {d["id"]: d for d in cluster.devices_json()}
    assert all(cli[d.id]["slice"] == d.slice for d in devs)


def test_connect_errors(cluster, tmp_path, monkeypatch):
    with pytest.raises(loom.ConnectError) as e:
        loom.connect("127.0.0.1:1", timeout=5)
    assert isinstance(e.value, ConnectionError) and e.value.status == -10 and "127.0.0.1:1" in str(e.value)
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "nothing-here"))
    with pytest.raises(loom.NotFoundError, match="loom up"):
        loom.connect()


def test_connect_with_a_token(cluster, tmp_path, monkeypatch):
    """The `loom up` cluster requires a token: found in the state directory, or given as token=."""
    token = (cluster.state / "token").read_text().strip()
    addr = (cluster.state / "controller.addr").read_text().strip()
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "elsewhere"))  # no local token to find
    with pytest.raises(loom.LoomError, match="requires a client token") as e:
        loom.connect(addr, timeout=10)
    assert e.value.status == -20
    with pytest.raises(loom.LoomError, match="not valid"):
        loom.connect(addr, timeout=10, token="loom_0123456789abcdef_" + "0" * 64)
    c = loom.connect(addr, timeout=10, token=token)
    assert c.device_count() == cluster.num_devices
    c.close()


def test_error_classes():
    seen = set()
    for code, cls in loom.errors.ERRORS.items():
        assert issubclass(cls, loom.LoomError) and cls not in seen
        seen.add(cls)
        e = cls("detail", code)
        assert str(e) == "detail" and e.status == code and e.status_name == loom.errors.STATUS_NAMES[code]
    assert issubclass(loom.TimeoutError, TimeoutError) and issubclass(loom.InvalidArgumentError, ValueError)
    assert loom.error_class(-1) is loom.InvalidArgumentError and loom.error_class(-999) is loom.LoomError


@pytest.mark.parametrize("dtype", DTYPES)
def test_put_get_every_dtype(client, dtype):
    x = sample(dtype, (8, 3))
    for sh in (None, loom.Sharding.tiled(range(8), 0), loom.Sharding.replicated([2, 5])):
        a = client.put(x, sh)
        assert a.shape == (8, 3) and a.dtype == x.dtype and a.nbytes == x.nbytes
        np.testing.assert_array_equal(a.numpy(), x)


def test_shardings(client):
    x = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    devs = [[4, 5, 6, 7], [0, 1, 2, 3]]
    cases = [(("x", "y"), None), ("x", "y"), (None, "y"), ("y", None), ()]
    for spec in cases:
        sh = loom.Sharding.named(devs, ("x", "y"), spec)
        a = client.put(x, sh)
        np.testing.assert_array_equal(a.numpy(), x)
        got = a.sharding
        assert got.devices == sh.devices and got.mesh_shape == (2, 4)
        assert got.same_layout(sh, x.shape)
        sshape = sh.shard_shape(x.shape)
        info = a.shards_info()
        assert len(info) == 8
        for i, (dev, offs) in enumerate(sh.shards(x.shape)):
            assert info[i][0] == dev and tuple(info[i][1]) == offs and tuple(info[i][2]) == sshape
            region = tuple(slice(o, o + n) for o, n in zip(offs, sshape))
            np.testing.assert_array_equal(a.shard(i), x[region])
    # Non-contiguous and big-endian inputs are put correctly (copied once on the host).
    t = np.arange(24, dtype=">i4").reshape(4, 6).T
    np.testing.assert_array_equal(client.put(t, loom.Sharding.tiled(range(2), 1)).numpy(), t)


def test_put_errors(client):
    x = np.zeros((8, 3), np.float32)
    with pytest.raises(ValueError, match="does not split into 3"):
        client.put(x, loom.Sharding.tiled(range(3), 0))
    with pytest.raises(loom.LoomError, match="99"):
        client.put(x, loom.Sharding.single(99))
    with pytest.raises(TypeError, match="object"):
        client.put(np.array([object()]))


def test_compile_and_run(client):
    exe = client.compile(ADD, name="add.mlir")
    assert exe.form == "single" and list(exe.devices) == [0]
    assert [s.shape for s in exe.inputs] == [(4,), (4,)] and exe.outputs[0].dtype == np.float32
    a, b = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
    y = exe(a, b)  # numpy inputs are put with the program's sharding
    np.testing.assert_array_equal(y.numpy(), a + b)
    (z,), fut = exe.launch(y, client.put(b))
    fut.wait(timeout=30)
    assert fut.done() and fut.sequence > 0 and fut.exception() is None
    np.testing.assert_array_equal(z.block_until_ready().numpy(), a + 2 * b)
    assert client.compile(ADD) is client.compile(ADD)  # cached
    exe3 = client.compile(ADD, devices=[3])
    y3 = exe3(a, b)
    assert y3.sharding.devices == (3,)
    np.testing.assert_array_equal(y3.numpy(), a + b)


def test_chained_launches(client):
    exe = client.compile(ADD)
    one = client.put(np.ones(4, np.float32))
    y = client.put(np.zeros(4, np.float32))
    for _ in range(200):  # issued without waiting; each consumes the previous output
        y = exe(y, one)
    np.testing.assert_array_equal(y.numpy(), np.full(4, 200, np.float32))


def test_replicas_program(client):
    exe = client.compile(REPLICA_SUM)
    assert exe.form == "replicas" and exe.info["num_replicas"] == 8
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    y = exe(x)
    assert y.shape == (8, 2)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(x.sum(0), (8, 2)))


def test_program_errors(client):
    with pytest.raises(loom.ParseError) as e:
        client.compile("module {\n  func.func public @main( -> \n}\n", name="broken.mlir")
    assert "broken.mlir:2" in str(e.value)
    exe = client.compile(ADD)
    with pytest.raises(loom.ShapeMismatchError, match=r"shape \(5,\)"):
        exe(np.ones(5, np.float32), np.ones(4, np.float32))
    with pytest.raises(loom.InvalidArgumentError, match="takes 2 inputs"):
        exe(np.ones(4, np.float32))
    # A loom array of the wrong shape reaches the controller, which fails the launch.
    y, fut = exe.launch(client.put(np.ones(5, np.float32)), client.put(np.ones(4, np.float32)))
    with pytest.raises(loom.ShapeMismatchError, match="input 0"):
        fut.wait(timeout=30)
    with pytest.raises(loom.ShapeMismatchError):
        y[0].numpy()
    with pytest.raises(loom.InvalidArgumentError, match="6 devices"):
        client.compile(REPLICA_SUM, devices=range(6))


def test_delete(client):
    exe = client.compile(ADD)
    a = client.put(np.ones(4, np.float32))
    a.delete()
    assert a.is_deleted
    with pytest.raises(loom.NotFoundError, match="was deleted"):  # at the call: no outputs, no future
        exe.launch(a, a)


def test_close(cluster):
    c = loom.connect()
    a = c.put(np.ones(3))
    exe = c.compile(ADD)
    c.close()
    assert c.closed
    for f in (a.numpy, lambda: exe(np.ones(4, np.float32), np.ones(4, np.float32)), c.devices):
        with pytest.raises(loom.ClosedError):
            f()
    c.close()  # twice is fine


LONG_RUN = """
import sys, numpy as np, jax
from jax import lax
import loom.jax
loom.jax.initialize(patch_jax=False)
spin = loom.jax.jit(lambda n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.0000001),
                                             (np.int32(0), np.float32(1)))[1])
y = spin(np.int32(2**31 - 1))  # hours of work
print("waiting", flush=True)
try:
    y.block_until_ready()
    print("finished?!", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_then_exit(client, cluster):
    p = python_script(LONG_RUN, cluster.env)
    try:
        assert p.stdout.readline().strip() == "waiting", p.stderr.read()
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 3 and "interrupted" in out, err
        assert time.monotonic() - t0 < 5, "Ctrl-C took too long to stop waiting"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    # The endless launch does not hold device 0 forever: Ctrl-C cancelled it (and the session's end
    # would have aborted it anyway).
    exe = client.compile(ADD)
    y = exe(np.ones(4, np.float32), np.ones(4, np.float32))
    y.block_until_ready(timeout=60)
    np.testing.assert_array_equal(y.numpy(), np.full(4, 2, np.float32))


# A pmap over all 8 devices (both workers) whose while loop never ends (its condition is always
# true), with an all_reduce (pmax) in every iteration: only cancelling it stops it.
FOREVER = """
import numpy as np
from jax import lax
import loom.jax
loom.jax.initialize(patch_jax=False)
forever = loom.jax.pmap(lambda x: lax.while_loop(lambda c: True, lambda c: lax.pmax(c + 1, "i"), x), axis_name="i")
plus_one = loom.jax.pmap(lambda v: v + 1, axis_name="i")
"""

INTERRUPTED_WAIT = FOREVER + """
import sys
what = sys.argv[1]
y, fut = forever.launch(np.zeros(8, np.int32))
z = plus_one(y)  # queued behind y on every device, and consumes it
print("waiting", flush=True)
try:
    if what == "numpy":
        z.numpy()  # waits for z's launch, which waits for y's
    elif what == "block_until_ready":
        y.block_until_ready()
    else:
        fut.wait()
    print("finished?!", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    print("cancelled", fut.cancelled(), flush=True)
    try:
        z.numpy()
    except loom.CancelledError as e:
        print("consumer:", e, flush=True)
    sys.stdin.readline()  # the session stays open while the test uses the same devices
    raise
"""


@pytest.mark.parametrize("what", ["numpy", "block_until_ready", "future"])
def test_ctrl_c_cancels_what_it_waited_for(client, cluster, what):
    p = python_script(INTERRUPTED_WAIT, cluster.env, stdin=subprocess.PIPE, argv=[what])
    try:
        assert p.stdout.readline().strip() == "waiting", p.stderr.read()
        time.sleep(1.0)
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        assert p.stdout.readline().strip() == "interrupted", p.stderr.read()
        elapsed = time.monotonic() - t0
        assert elapsed < 5, f"Ctrl-C took {elapsed:.1f} s to stop waiting"
        assert p.stdout.readline().strip() == "cancelled True"
        line = p.stdout.readline().strip()
        assert line.startswith("consumer:") and "cancelled by the client" in line, line
        # The client is still connected: its launches were cancelled, not ended with its session.
        # Devices run launches in order, so this one completes only if the endless one stopped
        # on all 8 devices (and the consumer queued behind it went away).
        exe = client.compile(REPLICA_SUM)
        y = exe(np.ones((8, 2), np.float32))
        y.block_until_ready(timeout=60)
        np.testing.assert_array_equal(y.numpy(), np.full((8, 2), 8, np.float32))
        p.stdin.close()  # the script goes on: it re-raises KeyboardInterrupt
        p.wait(timeout=30)
        err = p.stderr.read()
        assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, (p.returncode, err)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_future_cancel(client):
    import loom.jax
    from jax import lax
    forever = loom.jax.pmap(lambda x: lax.while_loop(lambda c: True, lambda c: lax.pmax(c + 1, "i"), x),
                            axis_name="i")
    plus_one = loom.jax.pmap(lambda v: v + 1, axis_name="i")
    y, fut = forever.launch(np.zeros(8, np.int32))
    z = plus_one(y)
    with pytest.raises(loom.TimeoutError):
        fut.wait(timeout=0.3)
    assert not fut.done() and not fut.cancelled()
    assert fut.cancel() is True
    assert fut.done() and fut.cancelled() and fut.cancel() is True  # idempotent
    with pytest.raises(loom.CancelledError, match="cancelled by the client"):
        fut.wait()
    assert isinstance(fut.exception(), loom.CancelledError)
    for a in (y, z):
        with pytest.raises(loom.CancelledError, match="cancelled by the client"):
            a.numpy()
    with pytest.raises(loom.CancelledError):
        plus_one(y).block_until_ready(timeout=30)  # a consumer issued after the cancel
    # the devices go on; a finished launch is not changed by cancel()
    w, done = plus_one.launch(np.arange(8, dtype=np.int32))
    done.wait(timeout=60)
    assert done.cancel() is False and not done.cancelled()
    np.testing.assert_array_equal(w.numpy(), np.arange(1, 9, dtype=np.int32))


HOLD_MEMORY = """
import time, numpy as np, loom
c = loom.connect()
a = c.put(np.ones((8, 1 << 20), np.float32), loom.Sharding.tiled(range(8), 0))  # 4 MiB per device
print("holding", flush=True)
time.sleep(600)
"""


def test_dead_client_session_is_cleaned_up(client, cluster):
    def used():
        return [d["memory_used"] for d in cluster.devices_json()]

    gc.collect()  # this process's dropped arrays are freed now, not during the measurement
    time.sleep(1.5)  # memory use travels with the workers' heartbeats
    base = used()
    p = python_script(HOLD_MEMORY, cluster.env)
    try:
        assert p.stdout.readline().strip() == "holding", p.stderr.read()
        wait_for(lambda: all(u >= b + (4 << 20) for u, b in zip(used(), base)), 30, 0.2,
                 f"the client's arrays to show in the devices' memory use (before: {base}, now: {used()})")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    wait_for(lambda: all(u <= b for u, b in zip(used(), base)), 30, 0.2,
             "the dead client's memory to be freed")

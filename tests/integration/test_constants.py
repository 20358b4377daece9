"""Large constants travel as data (docs/scale.md "Large constants"): a program whose text carries a
big constant (what JAX writes for an array a jitted function closes over) is compiled with the
constant put as an array, one copy per worker through the data plane, and the program names it
(dense_resource<loom_array_SESSION_ID>); the controller never holds it. A program naming another
session's array, or one that does not exist, is refused."""
from pathlib import Path

import numpy as np
import pytest

from conftest import Cluster, loom_package

loom, _SKIP = loom_package()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

MiB = 1 << 20


def hwm_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def matvec_program(w):
    """main(x) = w @ x with w a constant written as hex, as JAX writes a closed-over array."""
    r, k = w.shape
    return (f'func.func @main(%x: tensor<{k}xf32>) -> tensor<{r}xf32> {{\n'
            f'  %w = stablehlo.constant dense<"0x{w.tobytes().hex().upper()}"> : tensor<{r}x{k}xf32>\n'
            f'  %0 = stablehlo.dot_general %w, %x, contracting_dims = [1] x [0] : '
            f'(tensor<{r}x{k}xf32>, tensor<{k}xf32>) -> tensor<{r}xf32>\n'
            f'  return %0 : tensor<{r}xf32>\n}}\n')


@pytest.fixture
def two_workers(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4)
    c.start_worker(4)
    c.wait_devices(8)
    return c


def test_a_big_constant_goes_as_an_array_not_through_the_controller(two_workers, monkeypatch):
    c = two_workers
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4096, 2048)).astype(np.float32)  # 32 MiB: a 64 MiB program text
    x = rng.standard_normal(2048).astype(np.float32)
    prog = matvec_program(w)
    base = hwm_kib(c.controller.pid)
    cl = loom.connect(c.addr)
    try:
        exe = cl.compile(prog)
        for dev in (0, 4):  # on a device of each worker
            (y,), f = cl.compile(prog, devices=[dev]).launch(x)
            f.result(timeout=120)
            np.testing.assert_allclose(y.numpy(), w @ x, rtol=1e-4, atol=1e-3)
        (y,), f = exe.launch(x)
        f.result(timeout=120)
        np.testing.assert_allclose(y.numpy(), w @ x, rtol=1e-4, atol=1e-3)
        grew = (hwm_kib(c.controller.pid) - base) * 1024
        print(f"program {len(prog) / MiB:.0f} MiB; the controller's peak RSS grew {grew / MiB:.1f} MiB")
        assert grew < 16 * MiB, f"the controller's peak memory grew {grew / MiB:.1f} MiB"
        # the constant is on each worker once (one device each), charged as device memory
        used = [d.memory_used for d in cl.devices(refresh=True)]
        assert sum(u >= w.nbytes for u in used) == 2, used
    finally:
        cl.close()
    # the same program with the constant left in its text (what lifting replaces) is over what
    # the controller takes in one message: lifting is what makes it work at all
    monkeypatch.setenv("LOOM_CONSTANTS_INLINE", "1")
    cl = loom.connect(c.addr)
    try:
        with pytest.raises(loom.LoomError, match="--max-payload"):
            cl.compile(prog)
    finally:
        cl.close()


def resource_program(name):
    return ('func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
            f'  %c = stablehlo.constant dense_resource<{name}> : tensor<4xf32>\n'
            '  %0 = stablehlo.add %x, %c : tensor<4xf32>\n'
            '  return %0 : tensor<4xf32>\n}\n')


def test_a_program_may_name_only_its_own_arrays(two_workers):
    c = two_workers
    a, b = loom.connect(c.addr), loom.connect(c.addr)
    try:
        secret = b.put(np.arange(4, dtype=np.float32) + 100, loom.Sharding.replicated([0, 4]))
        with pytest.raises(loom.LoomError, match=f"names array {secret.id} of session {b.session}"):
            a.compile(resource_program(f"loom_array_{b.session}_{secret.id}"))
        with pytest.raises(loom.LoomError, match="this session has no such array"):
            a.compile(resource_program(f"loom_array_{a.session}_999999"))
        with pytest.raises(loom.LoomError, match="dense_resource other than"):
            a.compile(resource_program("some_blob"))
        # its own array (16 bytes, as the constant needs) works
        mine = a.put(np.float32([1, 2, 3, 4]).view(np.uint8), loom.Sharding.replicated([0, 4]))
        (y,), f = a.compile(resource_program(f"loom_array_{a.session}_{mine.id}")).launch(np.ones(4, np.float32))
        f.result(timeout=60)
        np.testing.assert_array_equal(y.numpy(), [2, 3, 4, 5])
        # one of the wrong size is refused by the worker, naming it
        small = a.put(np.zeros(8, np.uint8), loom.Sharding.replicated([0, 4]))
        with pytest.raises(loom.LoomError, match="the constant needs 16"):
            a.compile(resource_program(f"loom_array_{a.session}_{small.id}"))
    finally:
        a.close()
        b.close()

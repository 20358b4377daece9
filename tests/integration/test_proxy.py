"""The IFRT proxy (`loom proxy`, started by `loom up --proxy-port`): unmodified JAX programs with
JAX_PLATFORMS=proxy and pathwaysutils run on a real local cluster (a controller, 2 workers x 4
devices, the proxy: separate processes over real sockets); the captured seed session replayed
message by message through a gRPC client (golden answers); bad input that must not kill it.

Needs jax/jaxlib 0.10.2, pathwaysutils 0.1.13 and grpcio (scripts/setup.sh installs them)."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loomtest import SOURCE_DIR, free_port, run_loom, time_limit, wait_for

grpc = pytest.importorskip("grpc")
pytest.importorskip("pathwaysutils")
from google.protobuf import empty_pb2  # noqa: E402  (jax's dependency; a generic wire decoder below)
from google.protobuf.unknown_fields import UnknownFieldSet  # noqa: E402

CAPTURE = SOURCE_DIR / "tests" / "data" / "ifrt-proxy" / "seed"
SERVICE = "/xla.ifrt.proxy.GrpcIfrtService/"
JAX_TIMEOUT = 240


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("proxy-state")
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(state)
    port = free_port()
    r = run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "4", "--proxy-port", str(port),
                 env=env, timeout=120, check=True)
    try:
        yield {"env": env, "port": port, "out": r.stdout, "state": state}
    finally:
        d = run_loom("down", env=env, timeout=60)
    # a proxy that crashed, or (sanitizer build) reported an error or a leak, makes this fail
    assert d.returncode == 0, d.stdout + d.stderr + (state / "proxy.log").read_text()


def run_jax(cluster, script, timeout=JAX_TIMEOUT):
    env = dict(cluster["env"])
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{cluster['port']}",
               IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def fields(data):
    """(number, wire type, value) of each field of a serialized message (google.protobuf's decoder)."""
    m = empty_pb2.Empty()
    m.ParseFromString(data)
    return [(f.field_number, f.wire_type, f.data) for f in UnknownFieldSet(m)]


def field(data, num):
    return next((v for n, _, v in fields(data) if n == num), None)


def test_up_prints_the_environment(cluster):
    out = cluster["out"]
    assert f"IFRT proxy: 127.0.0.1:{cluster['port']}" in out
    assert "export JAX_PLATFORMS=proxy" in out
    assert f"export JAX_BACKEND_TARGET=grpc://127.0.0.1:{cluster['port']}" in out
    assert "export IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true" in out


def test_seed_howto(cluster):
    """The seed how-to, unchanged, prints the distributed sum of 8 devices."""
    r = run_jax(cluster, SOURCE_DIR / "examples" / "proxy" / "tpu_workload.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Available devices: 8" in r.stdout
    assert "LoomDevice(id=7, worker=1, slice=slice-0)" in r.stdout
    assert "Distributed result: [8 8 8 8 8 8 8 8]" in r.stdout


def test_everyday_jax(cluster):
    r = run_jax(cluster, SOURCE_DIR / "examples" / "proxy" / "more_jax.py")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "pmap psum: [28.0, 28.0, 28.0, 28.0, 28.0, 28.0, 28.0, 28.0]" in out
    assert "put and get back: True" in out
    assert "shard_map psum: [[2016.0]]" in out
    assert "donated: [2.0, 2.0, 2.0, 2.0]" in out
    assert "jit sin matches numpy: True" in out
    assert "grad: [0.0, 2.0, 4.0]" in out
    assert "scalar: 7.0" in out
    assert "moved: [1, 2, 3, 4] [5]" in out  # CopyArrays
    assert "pmap output: [ 0.  2.  4.  6.  8. 10. 12. 14.]" in out  # AssembleArrayFromSingleDeviceArrays


def test_two_clients_at_once(cluster):
    """Two JAX processes on one proxy: two sessions, each its own Loom session."""
    env = dict(cluster["env"])
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{cluster['port']}",
               IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    scripts = [SOURCE_DIR / "examples" / "proxy" / n for n in ("tpu_workload.py", "more_jax.py")]
    procs = [subprocess.Popen([sys.executable, str(p)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, stdin=subprocess.DEVNULL) for p in scripts]
    outs = [p.communicate(timeout=JAX_TIMEOUT)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "Distributed result: [8 8 8 8 8 8 8 8]" in outs[0]
    assert "shard_map psum: [[2016.0]]" in outs[1]


def test_jit_with_named_sharding_is_partitioned(cluster, tmp_path):
    """jit over NamedSharding arrives unpartitioned: Loom's partitioner splits it, the result keeps
    its sharding and equals numpy's, and the session goes on."""
    script = tmp_path / "jit_named.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ('x', 'y'))\n"
        "x = np.arange(64, dtype=np.float32).reshape(8, 8)\n"
        "a = jax.device_put(x, NamedSharding(mesh, P('x', 'y')))\n"
        "r = jax.jit(lambda a: a @ a + 1)(a)\n"
        "print('equal:', np.array_equal(np.asarray(r), x @ x + 1), r.sharding.spec)\n"
        "print('after:', float(np.asarray(jax.jit(lambda v: v + 1)(np.float32(1)))))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "equal: True" in r.stdout, r.stdout + r.stderr
    assert "after: 2.0" in r.stdout  # the session goes on


def test_jit_with_an_uneven_split_inside(cluster, tmp_path):
    """A constraint splits 10 rows over the 4 devices of "y" (JAX refuses uneven argument and
    result shardings): Loom pads the shards and masks the padding; sum, mean, a contraction over
    the rows, softmax and argmax along them equal numpy's."""
    script = tmp_path / "uneven.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ('x', 'y'))\n"
        "x = (np.arange(60, dtype=np.float32).reshape(10, 6) % 7 - 3) / 2 + 0.25\n"
        "a = jax.device_put(x, NamedSharding(mesh, P()))\n"
        "ws = lambda v: jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P('y', None)))\n"
        "f = jax.jit(lambda a: (ws(jnp.exp(a)).sum(0), ws(a + 1).mean(), ws(jnp.exp(a)).T @ (a + 1),\n"
        "                       jax.nn.softmax(ws(a), axis=0), jnp.argmax(ws(-a * a), axis=0)))\n"
        "s, m, d, sm, am = (np.asarray(v) for v in f(a))\n"
        "e = np.exp(x)\n"
        "sx = np.exp(x - x.max(0)); sx /= sx.sum(0)\n"
        "ok = [np.allclose(s, e.sum(0), rtol=1e-5), np.allclose(m, (x + 1).mean(), rtol=1e-5),\n"
        "      np.allclose(d, e.T @ (x + 1), rtol=1e-5), np.allclose(sm, sx, rtol=1e-5, atol=1e-6),\n"
        "      np.array_equal(am, np.argmax(-x * x, axis=0))]\n"
        "print('uneven:', ok)\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "uneven: [True, True, True, True, True]" in r.stdout, r.stdout + r.stderr


def test_jax_random_through_the_proxy(cluster, tmp_path):
    """jax.random's programs carry sdy.sharding_constraint hints: they run, with JAX's numbers."""
    script = tmp_path / "rnd.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
        "print('random:', np.asarray(jax.random.normal(jax.random.key(0), (4,))).tolist())\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    local = subprocess.run([sys.executable, "-c", "import jax, numpy as np\n"
                            "print(np.asarray(jax.random.normal(jax.random.key(0), (4,))).tolist())"],
                           capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
    want = [float(v) for v in local.stdout.strip().strip("[]").split(",")]
    got = [float(v) for v in r.stdout.split("random:")[1].splitlines()[0].strip().strip("[]").split(",")]
    assert all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(got, want)) and len(got) == 4, (got, want)


def test_pathwaysutils_reshard_split_concatenate(cluster, tmp_path):
    """pathwaysutils.reshard (ReshardArrays, donation too), split_by_mesh_axis and
    concatenate_by_mesh_axis (RemapArrays) through the proxy: values and shardings as asked; each
    shard of an array over transposed mesh axes holds its own slice (Disassemble once returned
    the shards in tile order, not the client's device order)."""
    script = tmp_path / "remap.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "from pathwaysutils import reshard as rs\n"
        "from pathwaysutils.experimental import split_by_mesh_axis as sbm, concatenate_by_mesh_axis as cbm\n"
        "mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ('x', 'y'))\n"
        "x = np.arange(64, dtype=np.float32).reshape(8, 8)\n"
        "a = jax.device_put(x, NamedSharding(mesh, P('x', 'y')))\n"
        "b = rs.reshard(a, NamedSharding(mesh, P('y', 'x')))\n"
        "print('reshard:', np.array_equal(np.asarray(b), x), b.sharding.spec,\n"
        "      [s.data.shape for s in b.addressable_shards][:1], a.is_deleted())\n"
        "t = jax.device_put(x, NamedSharding(mesh, P('y', 'x')))  # mesh axes transposed: shards not in device order\n"
        "print('shards:', all(np.array_equal(np.asarray(s.data), x[s.index]) for s in t.addressable_shards),\n"
        "      all(np.array_equal(np.asarray(s.data), x[s.index]) for s in b.addressable_shards))\n"
        "c = rs.reshard(b, NamedSharding(mesh, P(None, 'y')), donate=True)\n"
        "print('donated:', b.is_deleted(), np.array_equal(np.asarray(c), x))\n"
        "lo, hi = sbm.split_by_mesh_axis(a, 'x')\n"
        "print('split:', np.array_equal(np.asarray(lo), x[:4]), np.array_equal(np.asarray(hi), x[4:]),\n"
        "      sorted(d.id for d in lo.devices()), sorted(d.id for d in hi.devices()))\n"
        "r = jax.device_put(x, NamedSharding(mesh, P(None, 'y')))\n"
        "r0, r1 = sbm.split_by_mesh_axis(r, 'x')\n"
        "print('replicated:', np.array_equal(np.asarray(r0), x), np.array_equal(np.asarray(r1), x))\n"
        "whole = cbm.concatenate_by_mesh_axis([lo, hi], 'x')\n"
        "print('concat:', np.array_equal(np.asarray(whole), x), whole.sharding.spec, len(whole.devices()))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert "reshard: True P('y', 'x') [(2, 4)] False" in out, r.stdout + r.stderr
    assert "shards: True True" in out, r.stdout
    assert "donated: True True" in out, r.stdout
    assert "split: True True [0, 1, 2, 3] [4, 5, 6, 7]" in out, r.stdout
    assert "replicated: True True" in out, r.stdout
    assert "concat: True P('x', 'y') 8" in out, r.stdout


def test_profiler_through_pathwaysutils_records_a_loom_trace(cluster, tmp_path):
    """jax.profiler.start_trace/stop_trace with pathwaysutils send the profiling PluginProgram; the
    proxy starts and stops Loom's launch trace and writes it under the state directory's traces/
    (SESSION/loom-trace.json, with the request beside it). The trace covers the launches run in
    between: a jit and a pmap psum, whose all_reduce shows inside execute on each of the 8
    devices. (JAX's own client-side trace then fails to upload to gs:// here: no network.)"""
    script = tmp_path / "profile.py"
    script.write_text(
        "import pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp, numpy as np\n"
        "f = jax.jit(lambda a: a * 2 + 1)\nx = jnp.arange(8.0)\nf(x).block_until_ready()\n"
        "psum = jax.pmap(lambda v: jax.lax.psum(v, 'i'), axis_name='i')\n"
        "jax.profiler.start_trace('gs://loom-test-bucket/trace')\nprint('started', flush=True)\n"
        "print('jit', np.asarray(f(x)).tolist())\n"
        "print('psum', np.asarray(psum(jnp.arange(8.0))).tolist(), flush=True)\n"
        "try:\n    jax.profiler.stop_trace()\n    print('stopped')\n"
        "except Exception as e:\n    print('client-side stop error:', type(e).__name__, str(e)[:200])\n")
    traces = cluster["state"] / "traces"
    before = set(traces.glob("*/loom-trace.json")) if traces.exists() else set()
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started" in r.stdout and "psum [28.0, 28.0, 28.0, 28.0, 28.0, 28.0, 28.0, 28.0]" in r.stdout, r.stdout
    new = set(traces.glob("*/loom-trace.json")) - before
    assert len(new) == 1, (new, r.stdout, r.stderr)
    path = new.pop()
    req = json.loads((path.parent / "profile-request.json").read_text())
    assert req["traceLocation"] == "gs://loom-test-bucket/trace"
    assert path.parent.name == req["xprofTraceOptions"]["traceSessionName"]
    trace = json.loads(path.read_text())
    launches = [e for e in trace["traceEvents"] if e.get("cat") == "launch"]
    assert trace["metadata"]["launches"] == len(launches) >= 2, trace["metadata"]
    assert all(e["args"]["status"] == "OK" for e in launches)
    psum = max(launches, key=lambda e: e["args"]["devices"])
    assert psum["args"]["devices"] == 8, launches
    seq = psum["args"]["seq"]
    dev = [e for e in trace["traceEvents"] if e.get("cat") == "device" and e["args"]["seq"] == seq]
    assert sorted({e["args"]["device"] for e in dev}) == list(range(8))
    coll = [e for e in trace["traceEvents"] if e.get("cat") == "collective" and e["args"]["seq"] == seq]
    assert sorted(e["args"]["device"] for e in coll) == list(range(8)) and {e["name"] for e in coll} == {"all_reduce"}
    for e in coll:  # inside its device's execute phase
        ex = next(d for d in dev if d["name"] == "execute" and d["args"]["device"] == e["args"]["device"])
        assert ex["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= ex["ts"] + ex["dur"] + 1
    for e in launches:  # within the recording
        assert 0 <= e["ts"] and e["ts"] + e["dur"] <= trace["metadata"]["duration_us"] + 1


def test_profiling_client_gone_mid_trace(cluster, tmp_path):
    """A JAX process that exits between start_trace and stop_trace: the proxy stops the recording
    when its session ends (the cluster's trace is not left running) and still writes it."""
    script = tmp_path / "gone.py"
    script.write_text(
        "import os, pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp\n"
        "jax.profiler.start_trace('gs://loom-test-bucket/gone')\n"
        "jax.jit(lambda a: a + 1)(jnp.arange(4)).block_until_ready()\nprint('started', flush=True)\nos._exit(0)\n")
    traces = cluster["state"] / "traces"
    before = set(traces.glob("*/loom-trace.json")) if traces.exists() else set()
    r = run_jax(cluster, script)
    assert r.returncode == 0 and "started" in r.stdout, r.stdout + r.stderr
    new = wait_for(lambda: set(traces.glob("*/loom-trace.json")) - before, 30, what="the abandoned trace's file")
    trace = json.loads(new.pop().read_text())
    assert trace["metadata"]["launches"] >= 1
    # the recording is over: a new one starts
    r = run_loom("trace", "start", env=cluster["env"])
    assert r.returncode == 0, r.stderr
    r = run_loom("trace", "stop", "--out", str(tmp_path / "t"), env=cluster["env"])
    assert r.returncode == 0, r.stderr


def test_unknown_and_malformed_plugin_programs(cluster, tmp_path):
    """A plugin program Loom does not know: UNIMPLEMENTED naming it; bad JSON, and persistence and
    reshard requests missing their fields: INVALID_ARGUMENT (the requests themselves:
    test_proxy_persist.py); the session goes on."""
    script = tmp_path / "persist.py"
    script.write_text(
        "import pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
        "from pathwaysutils import plugin_executable\n"
        "for prog in ['{\"reshardRequest\": {}}', '{\"persistenceWriteRequest\": {}}', 'not json', '[1, 2]',\n"
        "             '{\"elasticRequest\": {\"x\": 1}}',\n"
        "             '{\"profileRequest\": 3}']:\n"
        "    try:\n        plugin_executable.PluginExecutable(prog)\n        print('accepted:', prog)\n"
        "    except Exception as e:\n        print('error:', str(e)[:300])\n"
        "import jax.numpy as jnp\nprint('still serving', int(jnp.arange(3).sum()))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "UNIMPLEMENTED" in r.stdout and "elasticRequest is not supported by the Loom proxy" in r.stdout, r.stdout
    assert "reshardRequest: inSharding and outSharding must be lists" in r.stdout, r.stdout
    assert "persistence write request 0: b64_location is missing" in r.stdout, r.stdout + r.stderr
    assert "its JSON does not parse" in r.stdout and "its JSON is not an object" in r.stdout, r.stdout
    assert "profileRequest must be a JSON object" in r.stdout and "accepted" not in r.stdout, r.stdout
    assert "still serving 3" in r.stdout, r.stdout


def test_donated_inputs_are_deleted(cluster, tmp_path):
    """jit with donate_argnums: the executable reports the donated inputs, the client sees them
    deleted after the call (as on JAX's own backends), and a loop that donates its state each
    step computes the right values."""
    script = tmp_path / "donate.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp\n"
        "x = jnp.arange(8.0)\n"
        "f = jax.jit(lambda v, w: (v * 2 + w, w), donate_argnums=0)\n"
        "y, w = f(x, jnp.ones(8))\n"
        "print('deleted:', x.is_deleted(), np.asarray(y).tolist() == (np.arange(8.0) * 2 + 1).tolist())\n"
        "state = jnp.zeros((256, 1024))\n"
        "step = jax.jit(lambda s: s + 1.0, donate_argnums=0)\n"
        "for _ in range(30):\n"
        "    state = step(state)\n"
        "print('loop:', float(np.asarray(state).mean()))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deleted: True True" in r.stdout and "loop: 30.0" in r.stdout, r.stdout + r.stderr


def test_large_transfers_round_trip(cluster, tmp_path):
    """Arrays of several 1 MiB chunks (not a multiple of the chunk) and an empty one go to the
    cluster and back through HostBufferStore / HostBufferLookup bit for bit, on one device and
    sharded over eight."""
    script = tmp_path / "big.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((3, 1000, 1001)).astype(np.float32)\n"
        "print('one:', np.array_equal(np.asarray(jax.device_put(x, jax.devices()[0])), x))\n"
        "mesh = Mesh(np.array(jax.devices()), ('d',))\n"
        "y = rng.integers(-2**31, 2**31 - 1, size=(8, 500, 701), dtype=np.int32)\n"
        "a = jax.device_put(y, NamedSharding(mesh, P('d')))\n"
        "print('sharded:', np.array_equal(np.asarray(a), y), np.array_equal(np.asarray(a + 1), y + 1))\n"
        "e = np.zeros((0, 5), np.float32)\n"
        "print('empty:', np.asarray(jax.device_put(e, jax.devices()[1])).shape)\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one: True" in r.stdout and "sharded: True True" in r.stdout and "empty: (0, 5)" in r.stdout, \
        r.stdout + r.stderr


def test_host_buffer_store_and_lookup_bytes(cluster):
    """HostBufferStore chunks land in the host buffer bit for bit however they come: unpacked in
    place into the buffer of the announced size, or copied when a chunk carries an unknown field
    before its data, when no size was announced, and across chunks of odd sizes; HostBufferLookup
    streams the same bytes back. A store whose bytes differ from the announced size fails."""
    rng = __import__("random").Random(5)
    def store(ch, handle, chunks, size):
        md = b"\x09" + (7777).to_bytes(8, "little") + b"\x11" + handle.to_bytes(8, "little")
        if size is not None:
            md += b"\x18" + _varint(size)
        return ch.stream_unary(SERVICE + "HostBufferStore")(
            iter(chunks), metadata=[("ifrt-proxy-grpc-host-buffer-store-metadata-bin", md)], timeout=60)
    def lookup(ch, handle):
        req = b"\x09" + (7777).to_bytes(8, "little") + b"\x11" + handle.to_bytes(8, "little")
        return b"".join(field(m, 1) or b"" for m in ch.unary_stream(SERVICE + "HostBufferLookup")(req, timeout=60))
    parts = [rng.randbytes(n) for n in (300_000, 1 << 20, 7, 5_000_000, 1 << 20)]
    whole = b"".join(parts)
    with time_limit(120), channel(cluster) as ch:
        plain = [_msg(1, p) for p in parts]
        store(ch, 1, plain, len(whole))
        assert lookup(ch, 1) == whole
        # an unknown field (number 5, 4000 bytes) ahead of the data in every other chunk
        odd = [(_msg(5, rng.randbytes(4000)) if i % 2 else b"") + m for i, m in enumerate(plain)]
        store(ch, 2, odd, len(whole))
        assert lookup(ch, 2) == whole
        store(ch, 3, plain, None)  # no size announced: the buffer grows
        assert lookup(ch, 3) == whole
        for size in (len(whole) + 1, len(whole) - 10):  # fewer bytes than announced; more (the last chunk overflows)
            with pytest.raises(grpc.RpcError) as e:
                store(ch, 4, plain, size)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "arrived" in e.value.details()
        store(ch, 4, [plain[0]], len(parts[0]))  # the stream after a failed one is served
        assert lookup(ch, 4) == parts[0]


def test_default_layouts_are_answered(cluster, tmp_path):
    """GetDefaultLayout is answered with the dense row-major layout: JAX then caches it (a refusal
    it asks again before every call, and logs), and arrays report it."""
    script = tmp_path / "layout.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda v: v * 2)\ny = jnp.zeros((3, 4, 5), jnp.float32)\n"
        "for _ in range(20):\n    y = f(y)\n"
        "print('layout:', y.format.layout.major_to_minor, float(np.asarray(y).sum()))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layout: (0, 1, 2) 0.0" in r.stdout, r.stdout + r.stderr
    assert "get_default_layout" not in r.stderr, r.stderr


def test_a_closure_over_a_large_array(cluster, tmp_path):
    """A jitted function closing over an 80 MiB array: JAX writes it into the program, which is then
    over what the controller takes in one message; the proxy's compile puts it as an array instead
    (docs/scale.md "Large constants") and the result is right."""
    script = tmp_path / "closure.py"
    script.write_text(
        "import numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax, jax.numpy as jnp\n"
        "rng = np.random.default_rng(1)\n"
        "w = rng.standard_normal((20480, 1024)).astype(np.float32)\n"
        "x = rng.standard_normal(1024).astype(np.float32)\n"
        "y = np.asarray(jax.jit(lambda v: jnp.tanh(w @ v))(x))\n"
        "print('closure:', np.allclose(y, np.tanh(w @ x), rtol=1e-4, atol=1e-4))\n")
    r = run_jax(cluster, script)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "closure: True" in r.stdout, r.stdout + r.stderr


def _varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if not v:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _msg(num, body):
    return _varint(num << 3 | 2) + _varint(len(body)) + body


def _request(op_id, num, body):
    return _msg(1, b"\x09" + op_id.to_bytes(8, "little")) + _msg(num, body)


def test_make_error_arrays(cluster):
    """MakeErrorArrays: arrays whose every use fails with the error given; the session goes on."""
    init = _request(1, 2, b"")
    # error {code: 9 (FAILED_PRECONDITION), message: "boom"}, two empty specs, handles 5 and 6
    err = _msg(1, b"\x08\x09" + _msg(2, b"boom")) + _msg(2, b"") + _msg(2, b"") + \
        _msg(3, (5).to_bytes(8, "little") + (6).to_bytes(8, "little"))
    make = _request(2, 26, err)
    use = _request(3, 6, b"\x09" + (77).to_bytes(8, "little") + b"\x11" + (6).to_bytes(8, "little"))
    with time_limit(60), channel(cluster) as ch:
        got = list(ch.stream_stream(SERVICE + "IfrtSession")(iter([init, make, use]), metadata=session_metadata(),
                                                              timeout=30))
    assert len(got) == 3
    assert field(field(got[1], 1), 2) is None
    made = field(got[1], 26)
    assert made is not None and field(made, 1) == (5).to_bytes(8, "little") + (6).to_bytes(8, "little")
    st = field(field(got[2], 1), 2)
    assert field(st, 1) == 9 and b"boom" in field(st, 2)


def channel(cluster):
    return grpc.insecure_channel(f"127.0.0.1:{cluster['port']}")


def version_request(lo, hi):
    # GrpcGetVersionRequest{min_version{protocol_version: lo}, max_version{protocol_version: hi, serdes: 3}}
    return bytes([0x0a, 2, 0x08, lo, 0x12, 4, 0x08, hi, 0x10, 3])


def test_get_version(cluster):
    with channel(cluster) as ch:
        call = ch.unary_unary(SERVICE + "GetVersion")
        # version {protocol_version: 25, ifrt_serdes_version_number: 3}
        assert call(version_request(16, 25), timeout=10) == b"\x0a\x04\x08\x19\x10\x03"
        assert call(version_request(16, 20), timeout=10) == b"\x0a\x04\x08\x14\x10\x03"
        with pytest.raises(grpc.RpcError) as e:
            call(version_request(26, 30), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "16..25" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary(SERVICE + "NoSuchMethod")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED and "NoSuchMethod" in e.value.details()


def captured_requests():
    raw = CAPTURE / "raw"
    ops = sorted(p.name for p in raw.glob("*.req.pb"))
    return [((raw / n).read_bytes(), (raw / n.replace(".req.pb", ".resp.pb")).read_bytes()) for n in ops]


def session_metadata():
    # GrpcIfrtSessionMetadata{version{protocol_version: 25, ifrt_serdes_version_number: 3}, initialization_data{}}
    return [("ifrt-proxy-grpc-ifrt-session-metadata-bin", b"\x0a\x04\x08\x19\x10\x03\x12\x00")]


def test_replay_seed_capture(cluster):
    """The seed's captured IfrtRequests, replayed in order, get the captured kinds of answers (same
    op ids, same response member, same server handles) and the right host buffers."""
    pairs = captured_requests()
    assert len(pairs) == 32
    done = threading.Event()

    def requests():  # the stream stays open until the lookups are done (host buffers die with it)
        yield from (q for q, _ in pairs)
        done.wait(30)

    with time_limit(60), channel(cluster) as ch:
        it = ch.stream_stream(SERVICE + "IfrtSession")(requests(), metadata=session_metadata(), timeout=60)
        got = [next(it) for _ in pairs]
        session_id = None
        for (q, want), resp in zip(pairs, got):
            md = field(resp, 1)
            assert field(md, 1) == field(field(q, 1), 1)  # op_id echoed
            status = field(md, 2)
            kind = [n for n, _, _ in fields(q) if n != 1][0]
            assert status is None, fields(status)
            if kind == 27:  # get_default_layout of s32[8]: dense row-major, as PjRtLayout serializes it
                assert field(field(resp, 27), 1) == b"{0}"
            assert [n for n, _, _ in fields(resp) if n != 1] == [kind]  # the member matching the request
            if kind == 2:
                session_id = field(field(resp, 2), 8)
            if kind == 13:  # compile: the same executable handle as the capture
                assert field(field(resp, 13), 1) == field(field(want, 13), 1)
            if kind == 15:  # execute: the same output handle
                assert field(field(field(resp, 15), 2), 4) == field(field(field(want, 15), 2), 4)
        assert session_id
        # The 8 shards the client copied to host buffers 10, 12, ..., 24: each holds int32 8.
        lookup = ch.unary_stream(SERVICE + "HostBufferLookup")
        for h in range(10, 25, 2):
            req = b"\x09" + session_id.to_bytes(8, "little") + b"\x11" + h.to_bytes(8, "little")
            chunks = list(lookup(req, timeout=10))
            assert b"".join(field(c, 1) or b"" for c in chunks) == (8).to_bytes(4, "little")
        done.set()
        assert list(it) == []


def test_bad_input_keeps_the_proxy_serving(cluster):
    port = cluster["port"]
    # not HTTP/2 at all; then a valid preface followed by a garbage frame; then a truncated one
    for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64,
                 b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            while s.recv(4096):  # the proxy answers (GOAWAY) and closes
                pass
    with time_limit(60), channel(cluster) as ch:
        stream = ch.stream_stream(SERVICE + "IfrtSession")
        # a message that is not an IfrtRequest, one with an unknown request, then a real Init
        init = b"\x0a\x09\x09" + (7).to_bytes(8, "little") + b"\x12\x00"
        unknown = b"\x0a\x09\x09" + (8).to_bytes(8, "little") + b"\xe2\x01\x00"  # field 28: cost analysis
        got = list(stream(iter([b"\xff\xff\xff", unknown, init]), metadata=session_metadata(), timeout=30))
        assert len(got) == 3
        assert field(field(field(got[0], 1), 2), 1) == 3  # INVALID_ARGUMENT
        st = field(field(got[1], 1), 2)
        assert field(st, 1) == 12 and b"loaded_executable_cost_analysis_request" in field(st, 2)
        assert field(field(got[2], 1), 1) == 7 and field(got[2], 2) is not None
        # a lookup of a buffer that never comes: a bounded wait, then NOT_FOUND (the session is gone)
        with pytest.raises(grpc.RpcError) as e:
            list(ch.unary_stream(SERVICE + "HostBufferLookup")(b"\x09" + b"\x63" * 8 + b"\x11" + b"\x01" * 8,
                                                                timeout=5))
        assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DEADLINE_EXCEEDED)
    r = run_jax(cluster, SOURCE_DIR / "examples" / "proxy" / "tpu_workload.py")
    assert "Distributed result: [8 8 8 8 8 8 8 8]" in r.stdout, r.stdout + r.stderr


def test_proxy_port_in_use_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_loom("up", "--detach", "--workers", "1", "--devices-per-worker", "1", "--proxy-port", str(port),
                     env=env, timeout=120)
    run_loom("down", env=env, timeout=60)
    assert r.returncode != 0
    assert f"the IFRT proxy could not start on port {port}" in r.stderr


def test_mutated_messages(cluster, tmp_path):
    """The captured seed requests, mutated (bytes flipped, cut, spliced), against a `loom proxy`
    started by hand: every request gets an answer or the stream an error status, and the proxy
    keeps serving and exits cleanly (under the sanitizer build: no error, no leak)."""
    import random
    ctl = next(l.split()[-1] for l in cluster["out"].splitlines() if l.startswith("controller:"))
    port = free_port()
    log = open(tmp_path / "proxy.log", "w")
    proc = subprocess.Popen([os.environ.get("LOOM_BIN", str(SOURCE_DIR / "build" / "bin" / "loom")), "proxy",
                             "--listen", f"127.0.0.1:{port}", "--controller", ctl, "--host-buffer-wait", "200"],
                            stdout=log, stderr=subprocess.STDOUT, env=cluster["env"], stdin=subprocess.DEVNULL)
    try:
        rng = random.Random(int(os.environ.get("LOOM_PROXY_FUZZ_SEED", "11")))
        reqs = [q for q, _ in captured_requests()]
        ch = None
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        stream = ch.stream_stream(SERVICE + "IfrtSession")
        rounds = int(os.environ.get("LOOM_PROXY_FUZZ_ROUNDS", "40"))
        with time_limit(240):
            for _ in range(rounds):
                sent = []
                for q in reqs:
                    b = bytearray(q)
                    k = rng.random()
                    if k < 0.3 and b:
                        for _ in range(rng.randint(1, 4)):
                            b[rng.randrange(len(b))] = rng.randrange(256)
                    elif k < 0.4 and b:
                        del b[rng.randrange(len(b)):]
                    elif k < 0.5:
                        o = rng.choice(reqs)
                        cut = rng.randrange(len(o) + 1)
                        b = b[:rng.randrange(len(b) + 1)] + o[cut:]
                    sent.append(bytes(b))
                try:
                    got = list(stream(iter(sent), metadata=session_metadata(), timeout=30))
                    assert len(got) == len(sent)
                except grpc.RpcError as e:
                    assert e.code() != grpc.StatusCode.DEADLINE_EXCEEDED, e
        assert proc.poll() is None, (tmp_path / "proxy.log").read_text()
        assert ch.unary_unary(SERVICE + "GetVersion")(version_request(16, 25), timeout=10) == b"\x0a\x04\x08\x19\x10\x03"
    finally:
        if ch:
            ch.close()
        proc.terminate()
        rc = proc.wait(timeout=30)
        log.close()
    assert rc == 0, (tmp_path / "proxy.log").read_text()[-4000:]


def test_slices_for_pathwaysutils_elastic(tmp_path):
    """slice_index groups the devices by slice, as pathwaysutils' elastic helpers read it."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(tmp_path)
    port = free_port()
    run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "2", "--slices", "2", "--proxy-port",
             str(port), env=env, timeout=120, check=True)
    try:
        script = tmp_path / "elastic.py"
        script.write_text(
            "import pathwaysutils\npathwaysutils.initialize()\nimport jax\n"
            "from pathwaysutils.elastic import elastic\n"
            "print('slice_index:', [d.slice_index for d in jax.devices()])\n"
            "print('slice_to_devices:', {k: len(v) for k, v in elastic.get_slice_to_devices(jax.devices()).items()})\n"
            "print('active:', sorted(elastic.get_active_slice_indices()))\n"
            "print('backend:', jax.devices()[0].client.runtime_type)\n")
        r = run_jax({"env": env, "port": port}, script)
    finally:
        d = run_loom("down", env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "slice_index: [0, 0, 1, 1]" in r.stdout
    assert "slice_to_devices: {0: 2, 1: 2}" in r.stdout
    assert "active: [0, 1]" in r.stdout
    assert "backend: proxy/loom" in r.stdout
    assert d.returncode == 0, d.stderr


def test_default_device_assignment(cluster):
    md = b"\x0a\x09\x09" + (1).to_bytes(8, "little")
    def req(nr, np_):  # field 19 {num_replicas, num_partitions} (fixed64s)
        return md + b"\x9a\x01\x12\x09" + nr.to_bytes(8, "little") + b"\x11" + np_.to_bytes(8, "little")
    ok, bad = req(2, 4), req(3, 4)  # bad: 12 devices on an 8-device cluster
    with time_limit(60), channel(cluster) as ch:
        got = list(ch.stream_stream(SERVICE + "IfrtSession")(iter([ok, bad]), metadata=session_metadata(), timeout=30))
    da = field(field(got[0], 19), 1)
    assert field(da, 1) == 2 and field(da, 2) == 4
    comps = [v for n, _, v in fields(da) if n == 3]
    assert [field(c, 1) for c in comps] == [b"\x00\x04", b"\x01\x05", b"\x02\x06", b"\x03\x07"]  # packed ids
    assert field(field(field(got[1], 1), 2), 1) == 3  # INVALID_ARGUMENT


def test_client_killed_mid_session(cluster):
    """A JAX process killed while it works: its session is freed, the proxy serves the next one."""
    env = dict(cluster["env"])
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{cluster['port']}",
               IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    log = cluster["state"] / "proxy.log"
    before = log.read_text().count("lost its client")
    p = subprocess.Popen([sys.executable, str(SOURCE_DIR / "examples" / "proxy" / "more_jax.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL)
    for line in p.stdout:  # kill it in the middle, right after its first result
        if line.startswith("pmap psum:"):
            break
    p.kill()
    p.wait(timeout=30)
    deadline = time.monotonic() + 30
    while log.read_text().count("lost its client") <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.read_text().count("lost its client") > before
    r = run_jax(cluster, SOURCE_DIR / "examples" / "proxy" / "tpu_workload.py")
    assert "Distributed result: [8 8 8 8 8 8 8 8]" in r.stdout, r.stdout + r.stderr


def test_default_proxy_port_taken_is_a_note(tmp_path):
    """Without --proxy-port, a taken 29000 (another cluster's proxy) means no proxy and a note."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(tmp_path)
    with socket.socket() as s:
        try:  # hold it, unless someone else already does: either way it is taken
            s.bind(("127.0.0.1", 29000))
            s.listen(1)
        except OSError:
            pass
        r = run_loom("up", "--detach", "--workers", "1", "--devices-per-worker", "1", env=env, timeout=120)
        d = run_loom("down", env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "IFRT proxy: not started, port 29000 is in use" in r.stdout
    assert d.returncode == 0, d.stderr


def test_training_matches_plain_jax(cluster):
    """Data-parallel training (pmap, grads, pmean) through the proxy follows plain JAX's losses."""
    script = SOURCE_DIR / "examples" / "proxy" / "train_mlp.py"
    via = run_jax(cluster, script)
    env = {k: v for k, v in cluster["env"].items() if k != "JAX_PLATFORMS"}
    ref = subprocess.run([sys.executable, str(script), "--cpu"], capture_output=True, text=True, timeout=JAX_TIMEOUT,
                         env=env, stdin=subprocess.DEVNULL)
    assert via.returncode == 0 and ref.returncode == 0, via.stdout + via.stderr + ref.stderr

    def numbers(out):
        return [float(l.split()[-1]) for l in out.splitlines() if l.startswith(("step ", "weights checksum"))]

    a, b = numbers(via.stdout), numbers(ref.stdout)
    assert len(a) == len(b) == 5
    assert a[-2] < a[0] / 10  # it learned
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-4 * max(1.0, abs(y)), (a, b)


def test_lost_worker_is_a_lost_slice(tmp_path):
    """A worker killed under a session: the client's next use of its devices fails with DATA_LOSS,
    which pathwaysutils' elastic code reads as a slice that went down."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(tmp_path / "state")
    port = free_port()
    run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "2", "--slices", "2", "--proxy-port",
             str(port), env=env, timeout=120, check=True)
    go = tmp_path / "go"
    script = tmp_path / "lost.py"
    script.write_text(
        "import os, time, numpy as np, pathwaysutils\npathwaysutils.initialize()\nimport jax\nfrom jax import lax\n"
        "from pathwaysutils.elastic import elastic\n"
        "f = jax.pmap(lambda v: lax.psum(v, 'd'), axis_name='d')\n"
        "print('before:', np.asarray(f(np.ones(4, np.float32))).tolist(), flush=True)\n"
        f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
        "try:\n    print('after:', np.asarray(f(np.ones(4, np.float32))).tolist(), flush=True)\n"
        "except Exception as e:\n"
        "    print('error:', str(e).splitlines()[0], flush=True)\n"
        "    print('slice down:', elastic.is_error_due_to_slice_down(e, log_traceback=False), flush=True)\n")
    penv = dict(env, JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{port}",
                IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    errf = open(tmp_path / "client.err", "w")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=errf, text=True,
                         env=penv, stdin=subprocess.DEVNULL)
    try:
        first = ""
        for first in p.stdout:
            if first.startswith("before:"):
                break
        assert first.startswith("before: [4.0, 4.0, 4.0, 4.0]"), first
        state = dict(l.split("=", 1) for l in (tmp_path / "state" / "cluster").read_text().splitlines() if "=" in l)
        os.kill(int(state["workers"].split(",")[1].split(":")[0]), 9)  # worker 1: slice 1
        time.sleep(1.0)
        go.write_text("")
        out = p.communicate(timeout=JAX_TIMEOUT)[0]
    finally:
        if p.poll() is None:
            p.kill()
        run_loom("down", env=env, timeout=60)
        errf.close()
    err = (tmp_path / "client.err").read_text()[-3000:]
    assert "error: DATA_LOSS" in out and "worker is lost" in out, out + err
    assert "slice down: True" in out, out + err

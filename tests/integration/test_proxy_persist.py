"""Persistence and resharding through the IFRT proxy (pathwaysutils plugin programs): pathwaysutils.persistence.helper.write_arrays / read_arrays
send persistence plugin programs; the proxy runs them as Loom checkpoints in location/name, the
workers writing and reading their shards in parallel. JAX clients run unmodified
(JAX_PLATFORMS=proxy) against a real `loom up` cluster (controller, 2 workers x 4 devices, proxy:
separate processes over real sockets). Arrays come back bitwise equal, into the sharding they were
written with and into others (4 devices, other meshes); bad requests get clear errors and the
proxy keeps serving.

Needs jax/jaxlib 0.10.2, pathwaysutils 0.1.13 (scripts/setup.sh installs them)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from loomtest import free_port, run_loom

pytest.importorskip("pathwaysutils")

JAX_TIMEOUT = 240

PRELUDE = textwrap.dedent("""
    import datetime, json, sys
    import numpy as np
    import pathwaysutils
    pathwaysutils.initialize()
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pathwaysutils.persistence import helper

    T = datetime.timedelta(seconds=120)
    devs = jax.devices()
    mesh = Mesh(np.array(devs).reshape(2, 4), ("x", "y"))

    def bits(a):
        a = np.asarray(a)
        return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)

    def same(a, b):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(bits(a), bits(b)))

    def err(f):  # the first line of the error f raises (the client's JaxRuntimeError)
        try:
            f()
        except Exception as e:
            return type(e).__name__ + ": " + str(e).splitlines()[0]
        return "no error"

    def read(loc, names, like, shardings, devices):
        arrs, fut = helper.read_arrays(loc, names, [x.dtype for x in like], [x.shape for x in like],
                                       shardings, devices, T)
        fut.result()
        return arrs
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("persist-state")
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(state)
    port = free_port()
    run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "4", "--proxy-port", str(port),
             env=env, timeout=120, check=True)
    try:
        yield {"env": env, "port": port, "state": state}
    finally:
        d = run_loom("down", env=env, timeout=60)
    # a proxy that crashed, or (sanitizer build) reported an error or a leak, makes this fail
    assert d.returncode == 0, d.stdout + d.stderr + (state / "proxy.log").read_text()


def run_jax(cluster, tmp_path, body, *args):
    script = tmp_path / "client.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = dict(cluster["env"])
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{cluster['port']}",
               IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    r = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                       timeout=JAX_TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout + r.stderr
    return json.loads(lines[-1][len("RESULT "):])


def test_write_and_read_back_resharded(cluster, tmp_path):
    """f32, bf16 and int32 arrays sharded over the 8 devices are written in one bulk request, then
    read back into the same shardings, onto 4 devices with other specs, replicated, and over a
    mesh of the devices in reverse order: every read is bitwise what was written."""
    loc = tmp_path / "ckpt"
    res = run_jax(cluster, tmp_path, """
        loc = sys.argv[1]
        rng = np.random.default_rng(7)
        host = {
            "params/w": rng.standard_normal((16, 32)).astype(np.float32),
            "params/b": rng.standard_normal((8, 64)).astype(jnp.bfloat16),
            "step": rng.integers(-2**31, 2**31 - 1, size=(64,), dtype=np.int32),
        }
        specs = {"params/w": P("x", "y"), "params/b": P("x", None), "step": P(("x", "y"))}
        names = list(host)
        arrays = [jax.device_put(host[n], NamedSharding(mesh, specs[n])) for n in names]
        helper.write_arrays(loc, names, arrays, T).result()
        like = [host[n] for n in names]
        out = {}
        got = read(loc, names, like, [NamedSharding(mesh, specs[n]) for n in names], devs)
        out["same"] = [same(g, h) for g, h in zip(got, like)]
        out["same_sharding"] = [g.sharding == NamedSharding(mesh, specs[n]) for g, n in zip(got, names)]
        mesh4 = Mesh(np.array(devs[4:]).reshape(2, 2), ("a", "b"))
        other = [NamedSharding(mesh4, P("b", "a")), NamedSharding(mesh4, P(None, ("a", "b"))),
                 NamedSharding(mesh4, P())]
        got = read(loc, names, like, other, devs[4:])
        out["four"] = [same(g, h) for g, h in zip(got, like)]
        out["four_devices"] = [sorted(d.id for d in g.devices()) for g in got]
        rev = Mesh(np.array(devs[::-1]).reshape(4, 2), ("p", "q"))
        got = read(loc, ["params/w"], like[:1], [NamedSharding(rev, P("q", "p"))], devs[::-1])
        out["reversed"] = same(got[0], like[0])
        # the shards themselves are where the sharding puts them
        out["shards"] = all(same(s.data, like[0][s.index]) for s in got[0].addressable_shards)
        # read arrays are ordinary jax.Arrays: compute with them
        out["compute"] = float(jax.jit(lambda a: a.sum())(got[0])) == float(like[0].astype(np.float32).sum())
        print("RESULT " + json.dumps(out))
    """, loc)
    assert res["same"] == [True, True, True], res
    assert res["same_sharding"] == [True, True, True], res
    assert res["four"] == [True, True, True], res
    assert res["four_devices"] == [[4, 5, 6, 7]] * 3, res
    assert res["reversed"] and res["shards"] and res["compute"], res
    # on disk: one Loom checkpoint per name, safetensors files from both workers and a manifest
    for name in ("params/w", "params/b", "step"):
        d = loc / name
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["format"] == "loom-checkpoint", manifest
        assert [a["name"] for a in manifest["arrays"]] == [name]
        files = sorted(p.name for p in d.glob("*.safetensors"))
        assert len(files) >= 1, files
    assert len(list((loc / "params/w").glob("*.safetensors"))) == 2  # each worker wrote its shards
    # numpy reads what the workers wrote (safetensors: 8-byte header length, JSON header, data);
    # the tensors, NAME[o0:e0,o1:e1] slices, cover the array written (regenerated here)
    import numpy as np
    w = np.random.default_rng(7).standard_normal((16, 32)).astype(np.float32)
    seen = np.zeros(w.shape, bool)
    for p in sorted((loc / "params/w").glob("*.safetensors")):
        data = p.read_bytes()
        n = int.from_bytes(data[:8], "little")
        for key, t in json.loads(data[8:8 + n]).items():
            if key == "__metadata__":
                continue
            assert t["dtype"] == "F32" and key.startswith("params/w"), (key, t)
            lo, hi = t["data_offsets"]
            arr = np.frombuffer(data[8 + n + lo:8 + n + hi], np.float32).reshape(t["shape"])
            idx = tuple(slice(*map(int, r.split(":"))) for r in key[len("params/w["):-1].split(",")) \
                if key != "params/w" else ()
            assert np.array_equal(arr, w[idx]), key
            seen[idx] = True
    assert seen.all()


def test_overwrite_and_errors_keep_the_proxy_serving(cluster, tmp_path):
    """Writing a name again replaces it; a missing name, a dtype or shape that differs, an
    unwritable location, a gs:// location and a relative path each fail with a clear error in the
    client, and the same session then writes and reads on."""
    loc = tmp_path / "ck2"
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = run_jax(cluster, tmp_path, """
        loc, blocker = sys.argv[1], sys.argv[2]
        sh = NamedSharding(mesh, P("x", "y"))
        a = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
        helper.write_arrays(loc, ["v"], [jax.device_put(a, sh)], T).result()
        b = -a
        helper.write_arrays(loc, ["v"], [jax.device_put(b, sh)], T).result()
        out = {"overwritten": same(read(loc, ["v"], [b], [sh], devs)[0], b)}

        out["missing"] = err(lambda: read(loc, ["nope"], [a], [sh], devs))
        out["dtype"] = err(lambda: read(loc, ["v"], [a.astype(np.int32)], [sh], devs))
        out["shape"] = err(lambda: read(loc, ["v"], [a.reshape(32, 16)], [sh], devs))
        x = jax.device_put(a, sh)
        out["unwritable"] = err(lambda: helper.write_arrays(blocker + "/sub", ["v"], [x], T).result())
        out["gcs"] = err(lambda: helper.write_arrays("gs://bucket/ckpt", ["v"], [x], T).result())
        out["relative"] = err(lambda: helper.write_arrays("rel/dir", ["v"], [x], T).result())
        out["dotdot"] = err(lambda: helper.write_arrays(loc, ["../escape"], [x], T).result())
        # malformed requests, sent as pathwaysutils sends its own (compile fails)
        from pathwaysutils import plugin_executable
        good = json.loads(helper.get_bulk_write_request(loc, ["v"], [x], T))
        req = good["bulk_persistence_write_request"]["write_requests"][0]
        bad = [{"bulk_persistence_write_request": {"write_requests": 5}},
               {"bulk_persistence_write_request": {"write_requests": []}},
               {"bulk_persistence_read_request": {"read_requests": [{}]}},
               {"bulk_persistence_write_request": {"write_requests": [dict(req, b64_name="%%%")]}},
               {"bulk_persistence_write_request": {"write_requests": [dict(req, shape=[1, -2])]}},
               {"bulk_persistence_write_request": {"write_requests": [dict(req, devices={"device_ids": [1.5]})]}},
               {"bulk_persistence_write_request": {"write_requests": [req, req]}}]
        out["malformed"] = [err(lambda b=b: plugin_executable.PluginExecutable(json.dumps(b))) for b in bad]
        # the session goes on
        c = np.arange(8, dtype=np.int32)
        helper.write_arrays(loc, ["after"], [jax.device_put(c, NamedSharding(mesh, P(("x", "y"))))], T).result()
        got = read(loc, ["after", "v"], [c, b], [NamedSharding(mesh, P()), sh], devs)
        out["after"] = same(got[0], c) and same(got[1], b)
        print("RESULT " + json.dumps(out))
    """, loc, blocker)
    assert res["overwritten"], res
    assert "NOT_FOUND" in res["missing"] and "nope" in res["missing"], res
    assert "INVALID_ARGUMENT" in res["dtype"] and "array 'v' is f32[64,8], not i32[64,8]" in res["dtype"], res
    assert "INVALID_ARGUMENT" in res["shape"] and "array 'v' is f32[64,8], not f32[32,16]" in res["shape"], res
    assert "a-file" in res["unwritable"], res
    assert "UNIMPLEMENTED" in res["gcs"] and "gs://bucket/ckpt" in res["gcs"], res
    assert "INVALID_ARGUMENT" in res["relative"] and "not an absolute path" in res["relative"], res
    assert "INVALID_ARGUMENT" in res["dotdot"] and "../escape" in res["dotdot"], res
    assert all("INVALID_ARGUMENT" in m for m in res["malformed"]), res["malformed"]
    assert "named twice" in res["malformed"][-1], res["malformed"]
    assert res["after"], res
    # one save per name: the older save's files of "v" are gone
    assert len(list((loc / "v").glob("*.safetensors"))) == 2
    assert not (tmp_path / "escape").exists()


def test_sidechannel_reshard(cluster, tmp_path):
    """pathwaysutils.experimental.reshard sends a reshardRequest plugin program: arrays move into
    other shardings (other device counts, a reversed mesh, replicated), several at once, bitwise;
    donateInput deletes the arguments; the results feed a jit; malformed requests and a memory
    kind Loom has not get clear errors and the session goes on."""
    res = run_jax(cluster, tmp_path, """
        from pathwaysutils.experimental import reshard as xr
        from pathwaysutils import plugin_executable
        a = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
        b = (np.arange(32, dtype=np.float32) / 7).astype(jnp.bfloat16)
        c = np.arange(16 * 4, dtype=np.int32).reshape(16, 4)
        x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
        y = jax.device_put(b, NamedSharding(mesh, P(("x", "y"))))
        z = jax.device_put(c, NamedSharding(mesh, P(None, "y")))
        four = Mesh(np.array(devs[:4]), ("a",))
        rev = Mesh(np.array(devs[::-1]).reshape(4, 2), ("p", "q"))
        out = {}
        x4 = xr.reshard(x, NamedSharding(four, P("a")))
        out["four"] = same(x4, a) and [s.device.id for s in x4.addressable_shards] == [0, 1, 2, 3] \\
            and x4.addressable_shards[0].data.shape == (16, 8)
        yr, zr = xr.reshard([y, z], [NamedSharding(rev, P()), NamedSharding(rev, P("p", "q"))], donate=True)
        out["several"] = same(yr, b) and same(zr, c) and zr.addressable_shards[0].device.id == 7 \\
            and zr.addressable_shards[0].data.shape == (4, 2)
        out["jit"] = int(np.asarray(jax.jit(lambda u: (u * 2).sum())(zr))) == 2 * int(c.sum())

        out["donated"] = err(lambda: np.asarray(z))
        good = {"devices": {"device_ids": [0, 1]}, "xla_hlo_sharding": ""}
        bad = [{"reshardRequest": {"inSharding": [], "outSharding": []}},
               {"reshardRequest": {"inSharding": [good], "outSharding": 3}},
               {"reshardRequest": {"inSharding": [good], "outSharding": [good, good]}},
               {"reshardRequest": {"inSharding": [good], "outSharding": [dict(good, xla_hlo_sharding="%%")]}},
               {"reshardRequest": {"inSharding": [good], "outSharding": [dict(good, devices={"device_ids": [-1]})]}}]
        out["malformed"] = [err(lambda r=r: plugin_executable.PluginExecutable(json.dumps(r))) for r in bad]
        out["pinned"] = err(lambda: plugin_executable.PluginExecutable(json.dumps(
            {"reshardRequest": {"inSharding": [good], "outSharding": [dict(good, memory_kind="pinned_host")]}})))
        out["after"] = same(xr.reshard(x4, NamedSharding(mesh, P(None, ("x", "y")))), a)
        print("RESULT " + json.dumps(out))
    """)
    assert res["four"] and res["several"] and res["jit"], res
    assert "was deleted" in res["donated"], res
    assert all("INVALID_ARGUMENT" in m for m in res["malformed"]), res["malformed"]
    assert "UNIMPLEMENTED" in res["pinned"] and "pinned_host" in res["pinned"], res
    assert res["after"], res

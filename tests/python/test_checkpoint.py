"""Checkpoints and drain (docs/elastic.md "Checkpoints", "Drain") end to end: a controller, two
workers of 4 CPU devices (and a standby for the drains) as real processes, a Python client.

Checkpoints: arrays tiled, replicated and split over a 2-d mesh on 8 devices are saved (the
workers write safetensors files in parallel), loaded back onto 4 devices with other shardings and
compared bitwise; the files are read with the `safetensors` package itself; a truncated, corrupt
or missing file is an error naming it (and no array is created); a save that never wrote its
manifest is never loadable; `loom checkpoint ls|show|verify|rm`.

Drain: `loom drain` of a worker in the middle of a 200-step training loop (the elastic tests'
harness) gives bitwise the final parameters of a run without it; an array with no replica and no
snapshot survives a drain; no standby is a clear error."""
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from loomtest import run_loom, wait_for
from test_elastic import TRAIN, Daemons, bitwise_equal, reference, train  # noqa: F401 (the harness)

import loom
from loom import Sharding


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A controller with its own checkpoint directory and workers 0 and 1 (devices 0-3, 4-7)."""
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LOOM_CONTROLLER", raising=False)
    d = Daemons(tmp_path)
    d.ckdir = tmp_path / "ck"
    yield d
    d.stop()


def start(d, *extra):
    d.controller("--checkpoint-dir", str(d.ckdir), *extra)
    d.two_workers()
    return loom.connect(d.addr, timeout=60)


def ckfiles(d, name):
    return sorted(glob.glob(str(d.ckdir / "_" / name / "*.safetensors")))


def values():
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((64, 32)).astype(np.float32),
            "b": rng.standard_normal(32).astype(np.float32),
            "m": rng.integers(-1000, 1000, (16, 24)).astype(np.int32),
            "h": rng.standard_normal((8, 6)).astype(np.float16),
            "s": np.array(3.5, np.float64)}


def put_8(c, v):
    mesh = Sharding((2, 4), range(8), [(0,), (1,)])
    return {"w": c.put(v["w"], Sharding.tiled(range(8), 0)),
            "b": c.put(v["b"], Sharding.replicated(range(8))),
            "m": c.put(v["m"], mesh),
            "h": c.put(v["h"], Sharding((2, 4), range(8), [(), (0,)])),  # dim 1 over axis 0, replicated over axis 1
            "s": c.put(v["s"], 3)}


def test_save_on_8_load_on_4_resharded_bitwise(cluster):
    c = start(cluster)
    v = values()
    arrs = put_8(c, v)
    r = c.checkpoint_save("step100", arrs)
    assert r["arrays"] == 5 and r["files"] == 2, r
    # the same on 4 devices, every array laid out differently
    other = {"w": Sharding.tiled([0, 1, 2, 3], 1), "b": Sharding.tiled([3, 2, 1, 0], 0),
             "m": Sharding((2, 2), [1, 0, 3, 2], [(1,), (0,)]), "h": Sharding.replicated([2, 3]), "s": Sharding.single(0)}
    back = c.checkpoint_load("step100", shardings=other)
    for k in v:
        assert back[k].dtype == v[k].dtype and back[k].shape == v[k].shape
        assert back[k].numpy().tobytes() == v[k].tobytes(), k
        assert tuple(back[k].sharding.devices) == tuple(other[k].devices)
    # devices=: tiled along dim 0 where it divides, else replicated; default: as saved
    on2 = c.checkpoint_load("step100", ["w", "s"], devices=[6, 7])
    assert on2["w"].numpy().tobytes() == v["w"].tobytes() and on2["w"].sharding.devices == (6, 7)
    assert on2["s"].numpy().tobytes() == v["s"].tobytes()
    same = c.checkpoint_load("step100", ["m"])
    assert same["m"].sharding.devices == tuple(range(8)) and same["m"].numpy().tobytes() == v["m"].tobytes()
    # loaded arrays are ordinary arrays: saved again, they give the same values
    c.checkpoint_save("again", {"w": back["w"], "m": back["m"]})
    again = c.checkpoint_load("again", shardings={"w": 5, "m": 6})
    assert again["w"].numpy().tobytes() == v["w"].tobytes() and again["m"].numpy().tobytes() == v["m"].tobytes()
    c.close()


def test_files_are_valid_safetensors_and_replicas_are_written_once(cluster):
    from safetensors.numpy import load_file
    c = start(cluster)
    v = values()
    c.checkpoint_save("st", put_8(c, v))
    files = ckfiles(cluster, "st")
    assert len(files) == 2  # one per worker, written by the workers
    tensors = {}
    for f in files:
        for k, t in load_file(f).items():
            assert k not in tensors
            tensors[k] = t
    assert [k for k in tensors if k.startswith("b")] == ["b"]  # the replicated array once, whole
    np.testing.assert_array_equal(tensors["b"], v["b"])
    np.testing.assert_array_equal(tensors["s"], v["s"])
    # the manifest says which file holds which slice: reassemble every array from the files alone
    man = json.loads((cluster.ckdir / "_" / "st" / "manifest.json").read_text())
    for a in man["arrays"]:
        out = np.zeros(a["shape"], v[a["name"]].dtype)
        for s in a["slices"]:
            t = load_file(str(cluster.ckdir / "_" / "st" / man["files"][s["file"]]["path"]))[s["key"]]
            out[tuple(slice(o, o + n) for o, n in zip(s["offsets"], s["shape"]))] = t
        assert out.tobytes() == v[a["name"]].tobytes(), a["name"]
    assert sum(len(a["slices"]) for a in man["arrays"] if a["name"] == "w") == 8
    assert sum(len(a["slices"]) for a in man["arrays"] if a["name"] == "h") == 2  # 2 distinct regions of 8 shards
    c.close()


def test_errors_name_the_file_and_create_nothing(cluster):
    c = start(cluster)
    v = values()
    arrs = put_8(c, v)
    with pytest.raises(loom.NotFoundError, match="no checkpoint 'nope'"):
        c.checkpoint_load("nope", ["w"])
    c.checkpoint_save("good", {"w": arrs["w"], "b": arrs["b"]})
    with pytest.raises(loom.NotFoundError, match="has no array 'zz'"):
        c.checkpoint_load("good", ["zz"])
    with pytest.raises(loom.ShapeMismatchError, match=r"is f32\[64,32\], not f32\[32,64\]"):
        c.checkpoint_load("good", ["w"], expect={"w": ((32, 64), np.float32)})
    with pytest.raises(loom.LoomError, match=r"not i32\[64,32\]"):
        c.checkpoint_load("good", ["w"], expect={"w": (None, np.int32)})
    with pytest.raises(loom.InvalidArgumentError, match="does not split"):
        c.checkpoint_load("good", ["w"], shardings={"w": Sharding.tiled(range(3), 0)})
    with pytest.raises(loom.InvalidArgumentError, match="not a checkpoint name"):
        c.checkpoint_save("../escape", {"w": arrs["w"]})
    with pytest.raises(loom.InvalidArgumentError, match="cannot hold"):
        c.checkpoint_save("x", {'w"': arrs["w"]})
    # an unwritable place: the checkpoint's directory path is taken by a file
    (cluster.ckdir / "_" / "blocked").write_text("not a directory")
    with pytest.raises(loom.LoomError, match="blocked"):
        c.checkpoint_save("blocked", {"w": arrs["w"]})
    assert c.checkpoint_verify("good")["ok"]

    # a truncated file: a clear error naming it; the arrays are not created (and nothing wrong is returned)
    files = ckfiles(cluster, "good")
    victim = files[-1]
    data = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(data[:-100])
    with pytest.raises(loom.LoomIOError, match=os.path.basename(victim) + " is truncated"):
        c.checkpoint_load("good", ["w", "b"], shardings={"w": Sharding.tiled(range(8), 0), "b": 0})
    ver = c.checkpoint_verify("good")
    assert not ver["ok"] and any("truncated" in f.get("error", "") for f in ver["files"])
    r = run_loom("checkpoint", "verify", "good", "--controller", cluster.addr)
    assert r.returncode == 1 and "BAD" in r.stdout and "truncated" in r.stdout, r.stdout
    # the same size, one byte flipped inside the data: corrupt, by its checksum
    flipped = bytearray(data)
    flipped[-7] ^= 0x40
    with open(victim, "wb") as f:
        f.write(flipped)
    with pytest.raises(loom.LoomError, match=os.path.basename(victim) + " is corrupt"):
        c.checkpoint_load("good", ["w"], shardings={"w": Sharding.tiled(range(8), 0)})
    # a missing file
    os.remove(victim)
    with pytest.raises(loom.LoomError, match=os.path.basename(victim) + " is missing"):
        c.checkpoint_load("good", ["w"])
    # the session still works, and holds none of the failed loads' arrays
    assert c.put(np.ones(4, np.float32)).numpy().sum() == 4
    c.close()


def test_half_written_checkpoint_is_never_loadable_and_overwrite_is_atomic(cluster):
    c = start(cluster)
    a = c.put(np.arange(16, dtype=np.float32), Sharding.tiled(range(8), 0))
    c.checkpoint_save("ck", {"a": a})
    first = ckfiles(cluster, "ck")
    b = c.put(np.arange(16, dtype=np.float32) * 2, Sharding.tiled(range(4), 0))
    c.checkpoint_save("ck", {"a": b})  # replaces it; the old save's files are gone
    later = ckfiles(cluster, "ck")
    assert not set(first) & set(later)
    np.testing.assert_array_equal(c.checkpoint_load("ck")["a"].numpy(), np.arange(16, dtype=np.float32) * 2)
    # files but no manifest (a save killed before its last step): listed as incomplete, never loaded
    half = cluster.ckdir / "_" / "half"
    half.mkdir()
    for f in later:
        (half / os.path.basename(f)).write_bytes(open(f, "rb").read())
    with pytest.raises(loom.NotFoundError, match="incomplete"):
        c.checkpoint_load("half", ["a"])
    ls = c.checkpoint_info()
    st = {x["name"]: x["complete"] for x in ls["checkpoints"]}
    assert st == {"ck": True, "half": False}, ls
    c.close()


def test_cli_ls_show_verify_rm(cluster):
    c = start(cluster)
    v = values()
    c.checkpoint_save("cli1", put_8(c, v))
    args = ("--controller", cluster.addr)
    ls = json.loads(run_loom("checkpoint", "ls", "--json", *args, check=True).stdout)
    assert [x["name"] for x in ls["checkpoints"]] == ["cli1"] and ls["checkpoints"][0]["num_arrays"] == 5
    text = run_loom("checkpoint", "ls", *args, check=True).stdout
    assert "cli1" in text and "complete" in text
    show = json.loads(run_loom("checkpoint", "show", "cli1", "--json", *args, check=True).stdout)
    w = [a for a in show["arrays"] if a["name"] == "w"][0]
    assert w["dtype"] == "f32" and w["shape"] == [64, 32] and w["sharding"]["devices"] == list(range(8))
    assert "f16" in run_loom("checkpoint", "show", "cli1", *args, check=True).stdout
    ver = run_loom("checkpoint", "verify", "cli1", *args, check=True).stdout
    assert "checkpoint cli1: ok" in ver
    r = run_loom("checkpoint", "show", "nope", *args)
    assert r.returncode != 0 and "no checkpoint 'nope'" in r.stderr
    assert "removed checkpoint cli1" in run_loom("checkpoint", "rm", "cli1", *args, check=True).stdout
    assert not (cluster.ckdir / "_" / "cli1").exists()
    assert "no checkpoints" in run_loom("checkpoint", "ls", *args, check=True).stdout
    assert run_loom("checkpoint", "--help", check=True).stdout.startswith("usage: loom checkpoint")
    assert run_loom("checkpoint", "bogus", *args).returncode == 2
    with pytest.raises(loom.NotFoundError):
        c.checkpoint_load("cli1", ["w"])
    c.close()


def test_checkpoints_are_per_user(tmp_path, monkeypatch):
    """With tokens, a user sees and loads only their own checkpoints."""
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LOOM_CONTROLLER", raising=False)
    tokens = tmp_path / "tokens"
    tok = {}
    for u in ("alice", "bob"):
        r = run_loom("token", "create", "--user", u, "--tokens-file", str(tokens), check=True)
        tok[u] = [w for w in r.stdout.split() if w.startswith("loom_")][0]
    d = Daemons(tmp_path)
    try:
        d.controller("--checkpoint-dir", str(tmp_path / "ck"), "--tokens-file", str(tokens))
        d.worker("w0")
        ca = loom.connect(d.addr, token=tok["alice"])
        wait_for(lambda: len(ca.devices(refresh=True)) == 4, 30, what="4 devices")
        ca.checkpoint_save("mine", {"x": ca.put(np.arange(8.0))})
        cb = loom.connect(d.addr, token=tok["bob"])
        assert cb.checkpoint_info()["checkpoints"] == []
        with pytest.raises(loom.NotFoundError):
            cb.checkpoint_load("mine", ["x"])
        with pytest.raises(loom.errors.PermissionError, match="admin"):
            cb.drain(0)
        assert os.path.isdir(tmp_path / "ck" / "alice" / "mine")
        assert oct(os.stat(tmp_path / "ck" / "alice").st_mode & 0o777) == "0o700"
        ca.close()
        cb.close()
    finally:
        d.stop()


def test_training_resumes_from_a_checkpoint_bitwise(cluster, tmp_path):
    """The 200-step loop saves its parameters after step 99 (that changes nothing), and a new run
    that loads them and runs steps 100-199 ends with bitwise the same parameters."""
    cluster.controller("--checkpoint-dir", str(cluster.ckdir))
    cluster.two_workers()
    ref = reference(cluster, tmp_path)
    r = train(cluster, tmp_path / "saved.npz", "--save-step", 99, "--save-name", "step99")
    assert "step 99: saved checkpoint step99" in r.stdout, r.stdout
    assert bitwise_equal(ref, tmp_path / "saved.npz")
    r = train(cluster, tmp_path / "resumed.npz", "--resume", "step99", "--resume-step", 99)
    assert "resumed from checkpoint step99 after step 99" in r.stdout, r.stdout
    assert bitwise_equal(ref, tmp_path / "resumed.npz")


# ---- drain ----

def test_drain_during_training_is_bitwise_invisible(cluster, tmp_path):
    cluster.controller("--checkpoint-dir", str(cluster.ckdir))
    _, w1 = cluster.two_workers()
    cluster.worker("s0", "--standby")
    cluster.wait_workers(2, 1)
    ref = reference(cluster, tmp_path)
    r = train(cluster, tmp_path / "drain.npz", "--drain-worker", 1, "--drain-step", 60)
    assert "step 60: drained {'worker': 1, 'replaced_by': 2" in r.stdout, r.stdout + r.stderr[-3000:]
    assert bitwise_equal(ref, tmp_path / "drain.npz")
    assert w1.wait(timeout=20) == 0, cluster.log("w1")[-3000:]  # released: it left by itself
    st = cluster.status()
    drained = [w for w in st["workers"] if w["id"] == 1][0]
    assert not drained["alive"] and "drained" in drained["reason"], drained
    assert st["totals"]["healthy_devices"] == 8
    assert any("drained onto worker 2" in e for e in st["events"]), st["events"]


def test_drain_keeps_arrays_without_replica_or_snapshot(cluster):
    c = start(cluster, "--no-snapshots")
    x = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    a = c.put(x, Sharding.tiled(range(8), 0))  # half of it only on worker 1, no snapshot anywhere
    with pytest.raises(loom.NotFoundError, match="no standby of 4 devices"):
        c.drain(1)
    r = run_loom("drain", "1", "--controller", cluster.addr)
    assert r.returncode != 0 and "no standby" in r.stderr
    cluster.worker("s0", "--standby")
    cluster.wait_workers(2, 1)
    out = json.loads(run_loom("drain", "1", "--json", "--controller", cluster.addr, check=True, timeout=60).stdout)
    assert out["worker"] == 1 and out["replaced_by"] == 2 and out["shards"] == 4, out
    assert a.numpy().tobytes() == x.tobytes()
    st = cluster.status()
    assert [w["devices"] for w in st["workers"] if w["id"] == 2] == [[4, 5, 6, 7]]
    # and the moved shards are ordinary: saved and loaded again
    c.checkpoint_save("after", {"a": a})
    assert c.checkpoint_load("after", shardings={"a": Sharding.replicated([4, 5])})["a"].numpy().tobytes() == x.tobytes()
    c.close()


def test_c_api(cluster):
    """The C calls (tests/integration/ckpt_probe.c): save, list, show, verify, load with checks, remove, drain
    errors; a save into a directory named by the caller and a load from it."""
    from loomtest import BUILD_DIR
    start(cluster)
    r = subprocess.run([str(BUILD_DIR / "tests" / "ckpt_probe"), cluster.addr, str(cluster.ckdir.parent / "dirs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok ckpt" in r.stdout, r.stdout + r.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (skipped where mounting one is not allowed)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_is_a_clear_error_and_leaves_nothing(cluster, small_disk):
    cluster.ckdir = small_disk / "ck"
    c = start(cluster)
    big = c.put(np.ones((1024, 1024), np.float32), Sharding.tiled(range(8), 0))  # 4 MiB: does not fit
    with pytest.raises(loom.LoomIOError, match="No space left on device"):
        c.checkpoint_save("big", {"x": big})
    assert ckfiles(cluster, "big") == [] and not (cluster.ckdir / "_" / "big" / "manifest.json").exists()
    small = c.put(np.arange(1024, dtype=np.float32), Sharding.tiled(range(8), 0))
    c.checkpoint_save("small", {"x": small})  # the space was given back: a smaller one fits
    assert c.checkpoint_load("small")["x"].numpy().tobytes() == np.arange(1024, dtype=np.float32).tobytes()
    c.close()


def test_pool_sessions_use_their_own_device_numbering(cluster):
    """A session of the shared pool (devices=N) sees its devices as 0..N-1: a checkpoint records its
    shardings in that numbering and loads them back onto the devices of the session that loads it."""
    c = start(cluster)
    hog = loom.connect(cluster.addr, devices=4)  # takes 4 devices, so the next sessions get others
    a = loom.connect(cluster.addr, devices=4)
    assert a.device_count() == 4
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    a.checkpoint_save("pool", {"x": a.put(x, Sharding.tiled(range(4), 0))})
    show = a.checkpoint_info("pool")
    assert show["arrays"][0]["sharding"]["devices"] == [0, 1, 2, 3], show
    sess = json.loads(run_loom("sessions", "--json", "--controller", cluster.addr, check=True).stdout)["sessions"]
    held = {s["session"]: s["device_ids"] for s in sess}
    assert sorted(held[hog.session] + held[a.session]) == list(range(8)), held  # a's are not 0-3
    a.close()
    b = loom.connect(cluster.addr, devices=4)
    got = b.checkpoint_load("pool")["x"]
    assert got.sharding.devices == (0, 1, 2, 3) and got.numpy().tobytes() == x.tobytes()
    got2 = b.checkpoint_load("pool", shardings={"x": Sharding.tiled([3, 1], 1)})["x"]
    assert got2.numpy().tobytes() == x.tobytes()
    b.close()
    hog.close()
    c.close()


def test_hostile_requests_get_clear_errors_and_the_controller_serves_on(cluster):
    """CHECKPOINT and DRAIN frames written by hand: repeated or reused ids, bad names, unknown
    operations, worker-only messages from a client. Each gets an ERROR; the session stays."""
    sys.path.insert(0, str(TRAIN.parent))
    import wire
    c = start(cluster)
    w = wire.Conn(cluster.addr)
    w.handshake()

    def entry(name, array):
        return wire.field_bytes(1, name) + wire.field_varint(2, array)

    def ask(type_, meta, rid):
        w.send(wire.frame(type_, meta, request_id=rid))
        code, msg, got = w.expect_error()
        assert got == rid
        return code, msg

    two = wire.field_bytes(3, entry("w", 7)) + wire.field_bytes(3, entry("b", 7))
    code, msg = ask(64, wire.field_varint(1, 2) + wire.field_bytes(2, "ck") + two, 10)
    assert code == wire.INVALID_ARGUMENT and "appears twice" in msg, msg
    code, msg = ask(64, wire.field_varint(1, 2) + wire.field_bytes(2, "ck") + wire.field_bytes(3, entry("w", 0)), 11)
    assert code == wire.INVALID_ARGUMENT and "already used" in msg, msg
    code, msg = ask(64, wire.field_varint(1, 1) + wire.field_bytes(2, "../x") + wire.field_bytes(3, entry("w", 1)), 12)
    assert code == wire.INVALID_ARGUMENT and "not a checkpoint name" in msg, msg
    code, msg = ask(64, wire.field_varint(1, 1) + wire.field_bytes(2, "ok") + wire.field_bytes(3, entry("w", 999)), 13)
    assert code == -2 and "does not exist" in msg, msg  # NOT_FOUND: not this session's array
    code, msg = ask(64, wire.field_varint(1, 99) + wire.field_bytes(2, "ok"), 14)
    assert code == wire.UNSUPPORTED, msg
    code, msg = ask(66, wire.field_varint(1, 1) + wire.field_bytes(2, "/etc/passwd"), 15)
    assert "not a request the controller answers" in msg, msg
    code, msg = ask(68, wire.field_varint(1, 4000000000), 16)
    assert code == -2 and "no worker" in msg, msg
    w.send(wire.frame(wire.PING, wire.field_varint(1, 5), request_id=17))
    t, rid, _, _ = w.recv_frame()
    assert (t, rid) == (wire.PONG, 17)
    w.close()
    # the other session did not notice
    x = np.arange(8, dtype=np.float32)
    c.checkpoint_save("still", {"x": c.put(x)})
    assert c.checkpoint_load("still")["x"].numpy().tobytes() == x.tobytes()
    c.close()

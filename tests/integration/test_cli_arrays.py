"""`loom array put` on a real cluster (2 workers x 4 devices): every kind of sharding round-trips
bit for bit (whole and shard by shard) for many dtypes and shapes, the shard table is the layout
of JAX's NamedSharding (checked against a model written here and against numpy slicing), --json
parses, bad options and files fail with a clear message and a non-zero exit status, and the
devices' memory use is back where it was once the command has exited."""
import json

import numpy as np
import pytest

from conftest import run_loom, wait_for
from dist import memory_used

try:
    import ml_dtypes
except ImportError:  # bf16 cases are skipped without it
    ml_dtypes = None

RNG = np.random.default_rng(4)


def floats(shape, dtype):
    """Random values of a float dtype with the special ones mixed in (NaN with a payload, -0.0, inf)."""
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array([np.nan, -0.0, np.inf, -np.inf], dtype)
    flat[:min(4, flat.size)] = specials[:min(4, flat.size)]
    if flat.size and dtype == np.float32:
        flat[:1].view(np.uint32)[0] = 0x7FC01234  # a NaN payload must survive too
    return x


def complexes(shape, dtype):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def bools(shape):
    return RNG.integers(0, 2, size=shape).astype(np.bool_)


def bf16(shape):
    return RNG.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


def put(addr, path, *args, timeout=60):
    return run_loom("array", "put", str(path), "--controller", addr, *map(str, args), timeout=timeout)


def parse_options(args):
    """(kind, mesh [(name, size)], devices or None, spec [[axis...] per entry]) from the options."""
    args = list(args)
    opt = {args[i]: args[i + 1] if i + 1 < len(args) else None for i in range(len(args)) if args[i].startswith("--")}
    devices = None
    if "--devices" in opt:
        devices = []
        for part in opt["--devices"].split(","):
            a, _, b = part.partition("-")
            devices += list(range(int(a), int(b or a) + 1))
    if "--device" in opt:
        return "single", [], [int(opt["--device"])], []
    if "--replicated" in opt:
        return "replicated", [], devices, []
    if "--mesh" in opt:
        mesh = [(n, int(s)) for n, s in (p.split("=") for p in opt["--mesh"].split(","))]
        spec = [[] if e == "-" else e.split("+") for e in opt.get("--spec", "").split(",") if e] if "--spec" in opt else []
        return "mesh", mesh, devices, spec
    return "single", [], [0], []


def model_shards(shape, args, num_devices=8):
    """The shards [(device, offsets, shape)] of NamedSharding(Mesh(devices, names), PartitionSpec(...)),
    worked out here from the definition: device p of the mesh (row-major) at coordinates c gets, along
    a dimension split over axes (a, b, ...) (a major), block index c_a * size_b + c_b of that many
    equal blocks."""
    kind, mesh, devices, spec = parse_options(args)
    if kind == "single":
        return [(devices[0], [0] * len(shape), list(shape))]
    if kind == "replicated":
        return [(d, [0] * len(shape), list(shape)) for d in (devices or range(num_devices))]
    names, sizes = [n for n, _ in mesh], [s for _, s in mesh]
    devices = devices or list(range(int(np.prod(sizes))))
    spec = spec + [[]] * (len(shape) - len(spec))
    out = []
    for p, dev in enumerate(devices):
        coords = dict(zip(names, np.unravel_index(p, sizes)))
        offs, dims = [], []
        for d, n in enumerate(shape):
            block, parts = 0, 1
            for a in spec[d]:
                block = block * dict(mesh)[a] + int(coords[a])
                parts *= dict(mesh)[a]
            offs.append(block * (n // parts))
            dims.append(n // parts)
        out.append((dev, offs, dims))
    return out


def region(x, offsets, dims):
    return x[tuple(slice(o, o + n) for o, n in zip(offsets, dims))]


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# (options, arrays): every sharding kind, each with arrays whose shapes it divides
CASES = [
    ((), [lambda: floats((3, 5), np.float16), lambda: np.array(2.5), lambda: np.zeros((0, 4), np.float32),
          lambda: bools((7,))]),
    (("--device", "5"), [lambda: complexes((5,), np.complex128), lambda: np.array(True), "bf16-2x3"]),
    (("--replicated",), [lambda: floats((2, 3, 4), np.float64), lambda: np.array(-7, np.int64)]),
    (("--replicated", "--devices", "0,4"), [lambda: ints((9,), np.int8), lambda: complexes((2, 2), np.complex64)]),
    (("--mesh", "x=8", "--spec", "x"), [lambda: bools((8,)), lambda: complexes((8, 3), np.complex128),
                                        lambda: np.zeros((0, 4), np.float32), lambda: ints((16,), np.uint64)]),
    (("--mesh", "x=2,y=4", "--spec", "x,y"), [lambda: floats((8, 4), np.float16), lambda: ints((2, 8), np.int64)]),
    (("--mesh", "x=2,y=4", "--spec", "x+y"), [lambda: floats((8, 4, 2), np.float32), lambda: ints((16, 3), np.uint16)]),
    (("--mesh", "x=2,y=4", "--spec", "y+x,-"), [lambda: floats((8, 4, 2), np.float32)]),
    (("--mesh", "x=2,y=4", "--spec", "-,y"), [lambda: floats((3, 4), np.float16), lambda: bools((2, 8))]),
    (("--mesh", "x=2,y=4", "--spec", "y,-,x"), [lambda: complexes((4, 3, 2), np.complex64)]),
    (("--mesh", "x=2,y=4", "--devices", "7,6,5,4,3,2,1,0", "--spec", "x"), [lambda: ints((2, 5), np.int8)]),
    (("--mesh", "x=2,y=2,z=2", "--spec", "z,x+y"), [lambda: ints((2, 4), np.int32), lambda: ints((4, 8, 1), np.uint8)]),
    (("--mesh", "x=2,y=4"), [lambda: np.array(1.0, np.float32), lambda: ints((3,), np.int16)]),
    (("--mesh", "x=4", "--devices", "1,3,5,7", "--spec", "-,x,-"), ["bf16-2x4x3", lambda: floats((2, 4, 3), np.float64)]),
]


def make(spec):
    if isinstance(spec, str):
        if ml_dtypes is None:
            return None
        return bf16(tuple(int(d) for d in spec.split("-")[1].split("x")))
    return spec()


def test_every_sharding_round_trips_bit_for_bit(cluster, tmp_path):
    problems, n = [], 0
    for args, arrays in CASES:
        for k, mk in enumerate(arrays):
            x = make(mk)
            if x is None:
                continue
            n += 1
            src, out, shards = tmp_path / f"x{n}.npy", tmp_path / f"y{n}.npy", tmp_path / f"shards{n}"
            np.save(src, x)
            bf = ["--bf16"] if ml_dtypes is not None and x.dtype == ml_dtypes.bfloat16 else []
            r = put(cluster.addr, src, *args, *bf, "--get", out, "--get-shards", shards, "--verify", "--json")
            what = f"{' '.join(args) or '(default)'} with {x.dtype}{list(x.shape)}"
            if r.returncode != 0:
                problems.append(f"{what}: exit {r.returncode}: {r.stderr}")
                continue
            j = json.loads(r.stdout)
            y = np.load(out)
            if not same_bits(x, y):
                problems.append(f"{what}: --get wrote {y.dtype}{list(y.shape)} {y!r}, not {x!r}")
            if j["verify"] != {"identical": True, "differing_elements": 0}:
                problems.append(f"{what}: verify says {j['verify']}")
            if j["shape"] != list(x.shape) or j["nbytes"] != x.nbytes or j["put"]["bytes"] != x.nbytes:
                problems.append(f"{what}: shape/bytes {j['shape']} {j['nbytes']}")
            want = model_shards(x.shape, args)
            got = [(s["device"], s["offsets"], s["shape"]) for s in j["shards"]]
            if got != want:
                problems.append(f"{what}: shards {got}, expected {want}")
                continue
            if j["put"]["bytes_on_devices"] != sum(s["nbytes"] for s in j["shards"]):
                problems.append(f"{what}: bytes_on_devices {j['put']['bytes_on_devices']}")
            for i, s in enumerate(j["shards"]):
                part = region(x, s["offsets"], s["shape"])
                if s["nbytes"] != part.nbytes or s["index"] != i:
                    problems.append(f"{what}: shard {i} says {s['nbytes']} bytes, numpy's slice has {part.nbytes}")
                if not same_bits(part, np.load(shards / f"shard_{i}.npy")):
                    problems.append(f"{what}: shard {i} (device {s['device']}) is not x{[slice(o, o + d) for o, d in zip(s['offsets'], s['shape'])]}")
    assert n == (30 if ml_dtypes is not None else 28), n  # every case ran (the 2 bf16 ones need ml_dtypes)
    assert not problems, "\n".join(problems)


def test_text_report_shows_each_shard(cluster, tmp_path):
    x = np.arange(8 * 6, dtype=np.int32).reshape(8, 6)
    np.save(tmp_path / "x.npy", x)
    args = ("--mesh", "x=2,y=4", "--spec", "y,x")
    r = put(cluster.addr, tmp_path / "x.npy", *args, "--verify", "--get", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'x.npy'}: i32[8,6] (192 B) as array ")
    assert lines[0].endswith("over mesh x=2,y=4 (devices 0-7) with spec y,x"), lines[0]
    assert lines[1].split() == ["SHARD", "DEVICE", "WORKER", "LOCAL", "OFFSETS", "SHAPE", "BYTES"]
    devs = {d["id"]: d for d in json.loads(run_loom("devices", "--json", "--controller", cluster.addr,
                                                    check=True).stdout)["devices"]}
    want = model_shards(x.shape, args)
    for i, (row, (dev, offs, dims)) in enumerate(zip(lines[2:10], want)):
        cells = row.split()
        assert cells[:2] == [str(i), str(dev)], row
        assert cells[2:4] == [str(devs[dev]["worker_id"]), str(devs[dev]["local_index"])], row
        assert cells[4] == "[" + ",".join(map(str, offs)) + "]" and cells[5] == "[" + ",".join(map(str, dims)) + "]", row
        assert " ".join(cells[6:]) == f"{region(x, offs, dims).nbytes} B", row
    assert lines[10].startswith("put: 192 B in ") and lines[10].endswith("; 8 shards, 192 B on the devices"), lines[10]
    assert lines[11].startswith("get: 192 B in ") and lines[11].endswith(f", written to {tmp_path / 'y.npy'}")
    assert lines[12] == f"verify: identical to {tmp_path / 'x.npy'} (48 elements, bit for bit)"
    assert lines[13].startswith("delete: array ") and len(lines) == 14
    assert same_bits(x, np.load(tmp_path / "y.npy"))
    # one device and replicated, described in words
    r = put(cluster.addr, tmp_path / "x.npy", "--device", "6")
    assert r.returncode == 0 and r.stdout.splitlines()[0].endswith(", on device 6"), r.stdout + r.stderr
    r = put(cluster.addr, tmp_path / "x.npy", "--replicated", "--devices", "3,0-1")
    assert r.returncode == 0 and r.stdout.splitlines()[0].endswith(", replicated on devices 3,0-1"), r.stdout + r.stderr
    assert [row.split()[1] for row in r.stdout.splitlines()[2:5]] == ["3", "0", "1"]


def test_bad_options_and_files(cluster, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((8, 6), np.float32))
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    np.save(tmp_path / "obj.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.save(tmp_path / "be.npy", np.arange(4, dtype=">f4"))
    np.save(tmp_path / "dt.npy", np.array(["2024-01-01"], dtype="datetime64[D]"))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.ones((2, 3))))
    if ml_dtypes is not None:  # numpy saves bfloat16 as raw 2-byte elements ('<V2')
        np.save(tmp_path / "v2.npy", bf16((4,)))
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    good = x.read_bytes()
    (tmp_path / "short.npy").write_bytes(good[:len(good) - 7])
    usage, failure = 2, 1
    cases = [
        # (arguments after FILE, file, exit status, words the message must contain)
        (("--mesh", "x=2,y=4", "--spec", "x,z"), x, usage, "'z' is not an axis of the mesh (its axes: x, y)"),
        (("--mesh", "x=2,y=4", "--spec", "x,x"), x, usage, "axis 'x' is used twice"),
        (("--mesh", "x=2,y=4", "--spec", "x+y,y"), x, usage, "axis 'y' is used twice"),
        (("--mesh", "x=2,y=4", "--spec", "-,y"), x, usage, "dimension 1 of " + str(x) + " (size 6) does not split into 4 equal shards"),
        (("--mesh", "x=2,y=4", "--spec", "x+y"), tmp_path / "be.npy", failure, "big-endian"),
        (("--mesh", "x=16", "--spec", "x"), x, usage, "dimension 0 of " + str(x) + " (size 8) does not split into 16"),
        (("--mesh", "x=2", "--spec", "x,-,-"), x, usage, "--spec has 3 entries but " + str(x) + " has 2 dimensions"),
        (("--mesh", "x=2", "--spec", "x,,"), x, usage, "entry 1 is empty"),
        (("--mesh", "x=2,y=4", "--devices", "0-3"), x, usage, "--mesh x=2,y=4 has 8 devices but --devices 0-3 lists 4"),
        (("--mesh", "x=4", "--devices", "0,1,1,2"), x, usage, "lists device 1 twice"),
        (("--replicated", "--devices", "3-1"), x, usage, "--devices wants a list"),
        (("--mesh", "x2"), x, usage, "--mesh wants named axes with their sizes"),
        (("--mesh", "x=2,x=4"), x, usage, "axis 'x' is named twice"),
        (("--mesh", "x=0"), x, usage, "has size 0"),
        (("--mesh", "x=16"), x, failure, "the mesh has 16 devices but the cluster has 8"),
        (("--device", "8"), x, failure, "there is no device 8: the cluster has 8 devices (0-7)"),
        (("--replicated", "--devices", "6-9"), x, failure, "there is no device 8"),
        (("--spec", "x"), x, usage, "--spec goes with --mesh"),
        (("--devices", "0-3"), x, usage, "--devices goes with --replicated or --mesh"),
        (("--device", "1", "--mesh", "x=2"), x, usage, "give one of --device, --replicated and --mesh"),
        (("--device", "minus"), x, usage, "--device wants a whole number"),
        (("--frobnicate",), x, usage, "unknown option"),
        ((), tmp_path / "missing.npy", failure, "cannot open " + str(tmp_path / "missing.npy") + ": No such file"),
        ((), tmp_path / "junk.npy", failure, "not an .npy file"),
        ((), tmp_path / "short.npy", failure, "truncated"),
        ((), tmp_path / "str.npy", failure, ".npy dtype '<U1' is not supported"),
        ((), tmp_path / "obj.npy", failure, ".npy dtype '|O' is not supported"),
        ((), tmp_path / "dt.npy", failure, "is not supported"),
        ((), tmp_path / "fortran.npy", failure, "Fortran order"),
    ]
    if ml_dtypes is not None:
        cases.append(((), tmp_path / "v2.npy", failure, "'<V2' is not supported (a raw 2-byte type: bfloat16"))
    problems = []
    for args, path, status, words in cases:
        r = put(cluster.addr, path, *args)
        if r.returncode != status or words not in r.stderr or r.stdout:
            problems.append(f"{' '.join(args)} on {path.name}: exit {r.returncode} (want {status}), "
                            f"stderr {r.stderr!r} (want {words!r}), stdout {r.stdout!r}")
    assert not problems, "\n".join(problems)
    if ml_dtypes is not None:  # --bf16 makes the raw 2-byte file readable
        r = put(cluster.addr, tmp_path / "v2.npy", "--bf16", "--verify")
        assert r.returncode == 0 and "verify: identical" in r.stdout, r.stderr
    # the command itself
    r = run_loom("array", "put", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: loom array put FILE.npy") and "examples" in r.stdout
    assert "--spec x+y,-" in r.stdout
    r = run_loom("array", "--help")
    assert r.returncode == 0 and "put" in r.stdout
    r = run_loom("array")
    assert r.returncode == 2 and "usage: loom array put" in r.stderr
    r = run_loom("array", "get")
    assert r.returncode == 2 and "unknown subcommand 'get'" in r.stderr
    r = run_loom("array", "put", "--controller", cluster.addr)
    assert r.returncode == 2 and "which file?" in r.stderr


def test_device_memory_is_back_after_the_command(cluster, tmp_path):
    base = memory_used(cluster.addr)
    assert len(base) == 8
    x = RNG.standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    np.save(tmp_path / "x.npy", x)
    for args in [("--replicated",), ("--mesh", "x=2,y=4", "--spec", "y,x"), ("--mesh", "x=2,y=4", "--spec", "-,y"),
                 ("--device", "3")]:
        r = put(cluster.addr, tmp_path / "x.npy", *args, "--verify")
        assert r.returncode == 0 and "verify: identical" in r.stdout, r.stderr
    r = put(cluster.addr, tmp_path / "x.npy", "--mesh", "x=8", "--spec", "x", "--get", tmp_path / "no" / "y.npy")
    assert r.returncode == 1 and "cannot create" in r.stderr  # fails after the put: the array is deleted anyway
    wait_for(lambda: memory_used(cluster.addr) == base, 20, interval=0.2,
             what=f"the devices' memory use to be back at {base}")

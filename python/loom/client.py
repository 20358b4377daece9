"""The Python client over libloom: a Client (one session with the controller), its Devices,
Arrays (global shape, dtype and sharding; data on the workers), Executables (compiled StableHLO)
and Futures (completion of asynchronous launches). Array data passes between numpy and libloom
by pointer: put and fetch make no copy in Python."""
import json
import math
import threading

import numpy as np

from . import _loom
from . import dtypes as _dt
from . import errors
from .sharding import Sharding

_PENDING = _loom.PENDING
_CANCELLED = _loom.CANCELLED


def _timeout_ms(timeout):
    return -1 if timeout is None else max(0, int(timeout * 1000))


class Device:
    """One device of the cluster as this session sees it: `id` (virtual, dense, stable),
    `kind`, `worker_id` and `local_index` (which worker, which of its devices), `host`, `pid`,
    `slice`, `memory_capacity`, `memory_used` and `memory_peak` (bytes, as of the last refresh;
    the peak is the most the device held at once since its worker started, launch temporaries
    included), `healthy`."""

    __slots__ = ("id", "kind", "worker_id", "local_index", "host", "pid", "slice", "memory_capacity",
                 "memory_used", "memory_peak", "healthy", "health_reason")

    def __init__(self, d):
        self.id, self.kind = d["id"], d["kind"]
        self.worker_id, self.local_index = d["worker_id"], d["local_index"]
        self.host, self.pid, self.slice = d["worker_host"], d["worker_pid"], d["slice"]
        self.memory_capacity, self.memory_used = d["memory_capacity"], d["memory_used"]
        self.memory_peak = d["memory_peak"]
        self.healthy, self.health_reason = d["healthy"], d["health_reason"]

    @property
    def platform(self):
        return self.kind

    def __repr__(self):
        h = "" if self.healthy else f", unhealthy: {self.health_reason}"
        return f"LoomDevice(id={self.id}, kind={self.kind}, worker={self.worker_id}, slice={self.slice}{h})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("loom.Device", self.id))


class _Launch:
    """A launch as its outputs remember it: the libloom future (`h`) and the launches that were
    still pending when it was issued and whose outputs it reads (`deps`, None when none). No
    reference to any array: holding outputs alive is the arrays' business. When Ctrl-C stops a
    wait, the launch waited for and the pending launches it depends on are cancelled."""

    __slots__ = ("h", "deps")

    def __init__(self, h, deps):
        self.h, self.deps = h, deps

    def pending(self):
        try:
            return self.h.status() == _PENDING
        except errors.LoomError:  # the client is closed
            return False


def _depends_on(deps, launch):
    """Adds launch (an input's producer) to deps when it is still pending; returns deps. Prunes the
    producer's own finished dependencies on the way, so chains of launches keep only what is
    pending."""
    if launch is None or (deps is not None and launch in deps) or not launch.pending():
        return deps
    if launch.deps is not None:
        launch.deps = [d for d in launch.deps if d.pending()] or None
    if deps is None:
        return [launch]
    deps.append(launch)
    return deps


def _cancel_interrupted(launches):
    """Ctrl-C stopped a wait for `launches`: cancels those still pending and, through their
    dependencies, every pending launch they wait on, so none is left running on the cluster.
    Errors are ignored (KeyboardInterrupt is what the caller re-raises); a second Ctrl-C while
    this talks to the controller propagates (the cancel requests already sent take effect)."""
    seen = set()
    todo = [launch for launch in launches if launch is not None]
    todo.reverse()  # the first one first
    while todo:
        launch = todo.pop()
        if id(launch) in seen:
            continue
        seen.add(id(launch))
        if not launch.pending():
            continue
        try:
            launch.h.cancel()
        except errors.LoomError:
            pass
        if launch.deps:
            todo.extend(reversed(launch.deps))


class Future:
    """Completion of a launch. wait() blocks, done() asks without blocking, result() waits and
    returns the launch's outputs, cancel() stops the launch on the cluster. Ctrl-C during a wait
    raises KeyboardInterrupt after cancelling the launch and the pending launches it depends on."""

    __slots__ = ("_h", "_outputs", "_launch")

    def __init__(self, h, outputs, launch=None):
        self._h, self._outputs = h, outputs
        self._launch = launch if launch is not None else _Launch(h, None)

    def wait(self, timeout=None):
        """Blocks until the launch completes; raises its error (loom.CancelledError once
        cancelled), or loom.TimeoutError."""
        try:
            self._h.wait(_timeout_ms(timeout))
        except KeyboardInterrupt:
            _cancel_interrupted([self._launch])
            raise

    def done(self):
        return self._h.status() != _PENDING

    def cancel(self):
        """Cancels the launch (only this one, not what it depends on): the controller fails it
        with loom.CancelledError and its devices stop running it (a queued launch is dropped, a
        running one stops at its next operation) and go on with later launches. Its outputs and
        launches that consume them then raise loom.CancelledError. Returns True when the launch
        ended cancelled, False when it had completed before (nothing changes then). Waits for
        the controller's acknowledgement (one round trip)."""
        return self._h.cancel() == _CANCELLED

    def cancelled(self):
        """True once the launch was cancelled (by cancel() or Ctrl-C)."""
        return self._h.status() == _CANCELLED

    def exception(self, timeout=None):
        try:
            self.wait(timeout)
        except errors.LoomError as e:
            if isinstance(e, errors.TimeoutError):
                raise
            return e
        return None

    def result(self, timeout=None):
        self.wait(timeout)
        return self._outputs

    @property
    def sequence(self):
        """The launch's global sequence number (0 until it completed successfully)."""
        return self._h.sequence

    def __repr__(self):
        st = self._h.status()
        s = "pending" if st == _PENDING else "done" if st == 0 else f"failed: {self._h.errmsg}"
        return f"<loom.Future {s}>"


class Array:
    """An array on the cluster: global `shape`, `dtype` (numpy), `sharding`. Its data lives as
    shards on the workers; numpy() (or np.asarray) fetches it assembled, waiting for the launch
    that produces it. Arrays are immutable; the fetched value is cached."""

    __slots__ = ("_h", "client", "_npy", "_shape", "_dtype", "_shc", "_launch", "__weakref__")

    def __init__(self, h, client, shape=None, dtype=None, launch=None):
        self._h, self.client, self._npy, self._shc, self._launch = h, client, None, None, launch
        self._shape = h.shape if shape is None else shape
        self._dtype = _dt.to_numpy(h.dtype) if dtype is None else dtype

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: math.prod(self._shape))
    nbytes = property(lambda self: self._h.nbytes)
    id = property(lambda self: self._h.id, doc="the array's id in its session")
    is_deleted = property(lambda self: self._h.deleted)

    @property
    def sharding(self):
        return Sharding._from_c(self._sharding_c())

    def _sharding_c(self):
        if self._shc is None:
            self._shc = self._h.sharding()
        return self._shc

    @property
    def devices(self):
        return self.sharding.devices

    def numpy(self):
        """The whole array as a (read-only) numpy array, fetched once."""
        if self._npy is None:
            out = np.empty(self._shape, self._dtype)
            try:
                self._h.get(out)
            except KeyboardInterrupt:
                _cancel_interrupted([self._launch])
                raise
            out.flags.writeable = False
            self._npy = out
        return self._npy

    def shard(self, index):
        """The shard on the sharding's device `index`, as numpy."""
        dev, offs, dims, nbytes = self._h.shard_info(index)
        out = np.empty(dims, self._dtype)
        try:
            self._h.get(out, index)
        except KeyboardInterrupt:
            _cancel_interrupted([self._launch])
            raise
        return out

    def shards_info(self):
        """[(device, offsets, shape)] for each shard, in the sharding's device order."""
        return [self._h.shard_info(i)[:3] for i in range(self._h.num_shards)]

    def block_until_ready(self, timeout=None):
        """Waits until the data exists (raises the producing launch's error); returns self.
        Ctrl-C raises KeyboardInterrupt after cancelling the producing launch and the pending
        launches it depends on."""
        try:
            self._h.block_until_ready(_timeout_ms(timeout))
        except KeyboardInterrupt:
            _cancel_interrupted([self._launch])
            raise
        return self

    def is_ready(self):
        try:
            self._h.block_until_ready(0)
            return True
        except errors.TimeoutError:
            return False

    def delete(self):
        """Frees the shards on the workers now (launches already issued still see them)."""
        self._h.delete()

    # numpy interoperation
    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __iter__(self):
        return iter(self.numpy())

    def __getitem__(self, idx):
        return self.numpy()[idx]

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __bool__(self):
        return bool(self.numpy())

    def __index__(self):
        return int(self.numpy())

    def __format__(self, spec):
        return format(self.numpy()[()] if not self._shape else self.numpy(), spec)

    def __str__(self):
        return str(self.numpy())

    def __repr__(self):
        if self._h.deleted:
            return f"loom.Array(<deleted>, shape={self._shape}, dtype={self._dtype})"
        body = np.array2string(self.numpy(), separator=", ", prefix="loom.Array(")
        return f"loom.Array({body}, dtype={self._dtype}, sharding={self.sharding})"


_FITS = {}


def _fits(have, want, shape, want_shape):
    """True when an array of `shape` laid out as `have` has, on each device of `want`, the shard
    `want` puts there (an array of the program's global shape), or is whole there (an array of
    per-replica shape, for replica programs, which the controller also takes)."""
    try:
        hs = dict(have.shards(shape))
        hshape = have.shard_shape(shape)
    except ValueError:
        return False
    if tuple(shape) != tuple(want_shape):
        return hshape == tuple(shape) and all(d in hs for d in want.devices)
    try:
        ws = want.shards(shape)
        wshape = want.shard_shape(shape)
    except ValueError:
        return False
    return hshape == wshape and all(hs.get(d) == off for d, off in ws)


class ArraySpec:
    """What an executable takes or returns: global `shape`, `dtype` and `sharding`."""

    __slots__ = ("shape", "dtype", "sharding")

    def __init__(self, t):
        code, dims, sh = t
        self.shape, self.dtype, self.sharding = tuple(dims), _dt.to_numpy(code), Sharding._from_c(sh)

    def __repr__(self):
        return f"ArraySpec(shape={self.shape}, dtype={self.dtype}, sharding={self.sharding})"


class Executable:
    """A compiled program. Call it with arrays (loom Arrays, or anything numpy takes, which is
    put with the sharding the program expects); it launches asynchronously and returns the
    outputs at once (one Array, or a tuple when the program returns several)."""

    __slots__ = ("_h", "client", "name", "info", "inputs", "outputs", "_in_c")

    def __init__(self, h, client, name):
        self._h, self.client, self.name = h, client, name
        self.info = h.info()
        raw = [h.input(i) for i in range(h.num_inputs)]
        self._in_c = [r[2] for r in raw]
        self.inputs = [ArraySpec(r) for r in raw]
        self.outputs = [ArraySpec(h.output(i)) for i in range(h.num_outputs)]

    @property
    def devices(self):
        return self.info["devices"]

    @property
    def form(self):
        return self.info["form"]

    def launch(self, *args):
        """Launches once: returns (outputs tuple, Future) without waiting. loom.Arrays whose
        shards are where the program needs them pass as they are; other inputs (and loom.Arrays
        laid out otherwise, through this host) are put with the program's input sharding."""
        h = self._h
        if len(args) != h.num_inputs:
            raise errors.InvalidArgumentError(
                f"{self.name} takes {h.num_inputs} inputs, {len(args)} were given")
        client = self.client
        ins = []
        deps = None
        for i, a in enumerate(args):
            if type(a) is Array and a.client is client and self._fits(a, i):
                ins.append(a._h)
                if a._launch is not None:
                    deps = _depends_on(deps, a._launch)
            else:
                ins.append(self._as_input(a, i))
        outs, fut = h.launch(ins)
        launch = _Launch(fut, deps)
        arrays = tuple(Array(o, client, spec.shape, spec.dtype, launch) for o, spec in zip(outs, self.outputs))
        return arrays, Future(fut, arrays, launch)

    def _fits(self, a, i):
        """Does loom.Array a have, on every device of the program, the shard input i needs?"""
        have = a._sharding_c()
        want = self._in_c[i]
        if have == want:
            return True
        key = (have, want, a._shape)
        ok = _FITS.get(key)
        if ok is None:
            ok = _fits(Sharding._from_c(have), Sharding._from_c(want), a._shape, self.inputs[i].shape)
            if len(_FITS) > 4096:
                _FITS.clear()
            _FITS[key] = ok
        return ok

    def __call__(self, *args):
        outs, _ = self.launch(*args)
        return outs[0] if len(outs) == 1 else outs

    def _as_input(self, x, i):
        spec = self.inputs[i]
        if isinstance(x, Array):  # from another client, or laid out otherwise: through this host
            if x.shape != spec.shape:
                raise errors.ShapeMismatchError(
                    f"{self.name}: input {i} has shape {x.shape}; the program takes {spec.shape}")
            x = x.numpy()
        x = np.asarray(x)
        if x.shape != spec.shape:
            raise errors.ShapeMismatchError(
                f"{self.name}: input {i} has shape {x.shape}; the program takes {spec.shape}")
        if x.dtype != spec.dtype:
            if not np.can_cast(x.dtype, spec.dtype, "same_kind"):
                raise errors.ShapeMismatchError(
                    f"{self.name}: input {i} has dtype {x.dtype}; the program takes {spec.dtype}")
            x = x.astype(spec.dtype)
        return self.client.put(x, spec.sharding)._h

    def __repr__(self):
        return (f"<loom.Executable {self.name}: {self.form}, {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs, devices {list(self.devices)}>")


class Client:
    """A session with a Loom controller. address: "HOST:PORT"; None finds it like the CLI does
    ($LOOM_CONTROLLER, else the local cluster of `loom up`). token: the client token for a
    controller that requires one (`loom token create`); None finds it like the CLI does
    ($LOOM_TOKEN, $LOOM_TOKEN_FILE, else the local cluster's). timeout (seconds, None: forever)
    bounds connecting and each request. Closing it (or the process ending) frees everything the
    session owns on the cluster."""

    def __init__(self, address=None, *, timeout=30.0, name=None, token=None, devices=None, priority=None,
                 launch_limit=None, queue_timeout=None, progress=True, weight=None):
        # devices/priority: ask the shared pool for that many devices in that class (docs/pool.md);
        # the session waits in the controller's queue until they are free (printing a progress
        # line on stderr unless progress=False; at most queue_timeout seconds if given) and then
        # sees them as devices 0..devices-1. launch_limit (seconds): the watchdog cancels a launch
        # running longer. weight: time-share the devices with other sessions of as many devices
        # that give a weight, launches interleaved in proportion to the weights. None: a shared
        # session on every device, as without the pool.
        self._c = _loom.connect(address, _timeout_ms(timeout), name or "python", token, int(devices or 0),
                                priority, int((launch_limit or 0) * 1000),
                                0 if queue_timeout is None else max(1, int(queue_timeout * 1000)), bool(progress),
                                int(weight or 0))
        self._devices = None
        self._compiled = {}
        self._lock = threading.Lock()

    @property
    def address(self):
        return self._c.address

    @property
    def session(self):
        return self._c.session

    @property
    def pool_devices(self):
        """Devices the shared pool gave this session (0: a shared session on every device)."""
        return self._c.pool_devices

    @property
    def priority(self):
        """The session's priority class."""
        return self._c.priority

    @property
    def queued_ms(self):
        """How long the session waited in the pool's queue, in milliseconds."""
        return self._c.queued_ms

    @property
    def closed(self):
        return self._c.closed

    def close(self):
        """Frees every array, executable and future of the session, then closes it."""
        self._compiled.clear()
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def devices(self, refresh=False):
        """The unified device list (virtual ids 0..n-1); refresh=True renews health and memory."""
        if self._c.closed:
            raise errors.ClosedError("the client is closed")
        if refresh or self._devices is None:
            if refresh:
                self._c.refresh_devices()
            self._devices = [Device(d) for d in self._c.devices()]
        return list(self._devices)

    def device_count(self):
        return len(self.devices())

    def sharding(self, s):
        """A loom.Sharding from: a Sharding, None (device 0), a device or id (that device), or a
        jax.sharding.NamedSharding over CPU devices standing for Loom's (CPU device k is virtual
        device k, see loom.jax)."""
        if s is None or isinstance(s, Sharding):
            return s
        if isinstance(s, (Device, int, np.integer)):
            return Sharding.single(s)
        mesh, spec = getattr(s, "mesh", None), getattr(s, "spec", None)
        if mesh is not None and spec is not None:
            return Sharding.named(np.vectorize(lambda d: d.id, otypes=[object])(mesh.devices), mesh.axis_names, spec)
        raise TypeError(f"cannot use {type(s).__name__} as a Loom sharding")

    def put(self, x, sharding=None):
        """Puts a host array on the cluster: sharding (see Client.sharding) says where. The data
        is read in place when it is C-contiguous and little-endian (otherwise copied once)."""
        a = np.asarray(x)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)  # (never for 0-d arrays, which it would make 1-d)
        code = _dt.from_numpy(a.dtype)
        sh = self.sharding(sharding)
        if sh is not None:
            sh.check(a.shape)
        h = self._c.put(a, code, a.shape, None if sh is None else sh._c())
        return Array(h, self)

    def compile(self, text, devices=None, name=None):
        """Compiles a StableHLO module (MLIR text as JAX's lowering prints it, or MLIR bytecode
        bytes as jax.export serializes it) for devices (virtual ids or Devices; None: 0..n-1 as
        the program needs). Cached per program and devices."""
        if isinstance(text, str):
            text = text.encode()
        devs = None if devices is None else tuple(getattr(d, "id", d) for d in devices)
        key = (text, devs)
        exe = self._compiled.get(key)
        if exe is None:
            exe = Executable(self._c.compile(text, devs, name), self, name or "<program>")
            with self._lock:
                self._compiled[key] = exe
        return exe

    # ---- checkpoints (docs/elastic.md "Checkpoints") ----
    def checkpoint_save(self, name, arrays):
        """Saves arrays ({name: loom.Array}) as checkpoint `name`: the workers write the shards they
        hold as safetensors files in parallel, then the manifest is written (replacing an older
        checkpoint of that name at once). Returns what was written (a dict: files, bytes, seconds)."""
        names = list(arrays)
        for k in names:
            if not isinstance(arrays[k], Array):
                raise TypeError(f"checkpoint_save: {k!r} is a {type(arrays[k]).__name__}, not a loom.Array "
                                "(put it first)")
        return json.loads(self._c.checkpoint_save(str(name), names, [arrays[k]._h for k in names]))

    def checkpoint_info(self, name=None):
        """The checkpoint's arrays (dtype, shape, saved sharding, slices) and files; with no name,
        the list of this user's checkpoints."""
        if name is None:
            return json.loads(self._c.checkpoint_query(3, None))
        return json.loads(self._c.checkpoint_query(4, str(name)))

    def checkpoint_verify(self, name):
        """Reads every file of the checkpoint and checks sizes, block checksums and headers: a dict
        with ok and, per file, ok/error."""
        return json.loads(self._c.checkpoint_query(5, str(name)))

    def checkpoint_remove(self, name):
        return json.loads(self._c.checkpoint_query(6, str(name)))

    def checkpoint_load(self, name, names=None, *, shardings=None, devices=None, expect=None):
        """Loads arrays of checkpoint `name` as new loom.Arrays: {name: Array}. names: which (None:
        all). Where they go: shardings {name: sharding} (anything Client.sharding takes), else
        devices (a list: each array tiled along dimension 0 over them when that divides it, else
        replicated on them), else the sharding each was saved with. Any device count works: each
        worker reads only the slices its new shards need. expect {name: (shape, dtype)} checks
        them (LOOM_SHAPE_MISMATCH otherwise)."""
        info = None
        if names is None or (devices is not None and not shardings):
            info = self.checkpoint_info(name)
        if names is None:
            names = [a["name"] for a in info["arrays"]]
        names = list(names)
        shardings = dict(shardings or {})
        shapes = {a["name"]: tuple(a["shape"]) for a in info["arrays"]} if info else {}
        sh = []
        for k in names:
            s = shardings.get(k)
            if s is None and devices is not None:
                devs = [getattr(d, "id", d) for d in devices]
                shape = shapes.get(k)
                if shape is None:
                    raise errors.NotFoundError(f"checkpoint {name!r} has no array {k!r}")
                s = Sharding.tiled(devs, 0) if shape and shape[0] % len(devs) == 0 else Sharding.replicated(devs)
            s = self.sharding(s)
            sh.append(None if s is None else s._c())
        dts, shp = [], []
        for k in names:
            e = (expect or {}).get(k)
            shp.append(None if e is None or e[0] is None else tuple(int(x) for x in e[0]))
            dts.append(0 if e is None or e[1] is None else _dt.from_numpy(np.dtype(e[1])))
        hs, _ = self._c.checkpoint_load(str(name), names, sh, dts, shp)
        return {k: Array(h, self) for k, h in zip(names, hs)}

    def drain(self, worker):
        """Moves worker `worker`'s devices and shards to a standby and releases it (an admin
        operation; docs/elastic.md "Drain"). Returns a dict: replaced_by, shards, ms."""
        return json.loads(self._c.drain(int(worker)))

    def __repr__(self):
        if self.closed:
            return "<loom.Client closed>"
        return f"<loom.Client session {self.session} at {self.address}, {self.device_count()} devices>"


def connect(address=None, *, timeout=30.0, name=None, token=None, devices=None, priority=None, launch_limit=None,
            queue_timeout=None, progress=True, weight=None):
    """Connects to a Loom controller (see Client). devices=N, priority="batch": a session of the
    shared pool (docs/pool.md)."""
    return Client(address, timeout=timeout, name=name, token=token, devices=devices, priority=priority,
                  launch_limit=launch_limit, queue_timeout=queue_timeout, progress=progress, weight=weight)

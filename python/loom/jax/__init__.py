"""loom.jax: JAX on a Loom cluster, two ways.

initialize() points JAX's own IFRT proxy backend at the cluster's proxy (what JAX_PLATFORMS=proxy
and pathwaysutils.initialize() do): unmodified JAX code then runs on the cluster with real
jax.Arrays. That is the way to run JAX programs; the rest of this module is the older way.

jit, pmap and shard_map here lower the function with the installed JAX (for CPU), Loom compiles
the StableHLO once per input signature, and each call launches it through Loom's own client and
returns lazy loom.Arrays (their .numpy(), printing or np.asarray fetch the values).

Devices: JAX lowers against its own CPU devices, one per cluster device: JAX's CPU device k
stands for Loom's virtual device k (so a jax.sharding.Mesh, NamedSharding or PartitionSpec over
those CPU devices names cluster devices). That needs JAX configured with as many CPU devices as
the cluster has *before* JAX's backend starts: initialize(patch_jax=False) (or the first use of
these functions) does it; when JAX has already started with fewer, the functions that need them
say so.

    import loom.jax
    loom.jax.initialize(patch_jax=False)   # connect the client loom.jax's functions use
    mesh = loom.jax.make_mesh((2, 4), ("x", "y"))
    f = loom.jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    y = f(x)                               # loom.Array; y.numpy() waits and fetches

What runs where: jit runs a single-device program (on `device`, default virtual device 0);
pmap and shard_map run SPMD over their devices or mesh with collectives; jit with NamedSharding
in_shardings / out_shardings (and no shard_map) is a global program Loom's partitioner splits
over the mesh's devices (docs/partitioner.md). Inputs that are loom.Arrays laid out as the program expects pass
without a copy; other inputs (numpy, JAX arrays, scalars, loom.Arrays laid out otherwise) are
put on the cluster with the program's sharding (through this host).
"""
import os
import re
import threading
import warnings

import jax
import jax.numpy as jnp  # noqa: F401  (users of loom.jax expect jnp to be importable alongside)
import numpy as np
from jax import tree_util

from .. import errors
from ..client import Array, Client
from ..sharding import Sharding

__all__ = ["initialize", "use_proxy", "client", "devices", "device_count", "Mesh", "make_mesh", "jit", "pmap", "shard_map", "put",
           "device_put", "NamedSharding", "PartitionSpec", "P", "cpu_device", "loom_device"]

NamedSharding = jax.sharding.NamedSharding
PartitionSpec = P = jax.sharding.PartitionSpec

# JAX's own functions, kept before initialize() may route the public names to Loom.
_jax_devices = jax.devices
_jax_device_count = jax.device_count
_jax_local_devices = jax.local_devices
_jax_local_device_count = jax.local_device_count
_jax_pmap = jax.pmap

_lock = threading.RLock()
_default = None          # the default Client
_jax_note = None         # why JAX could not be given enough CPU devices, if it could not


# ---- setup ----

def _backends_started():
    from jax._src import xla_bridge
    f = getattr(xla_bridge, "backends_are_initialized", None)
    if f is not None:
        return f()
    return bool(getattr(xla_bridge, "_backends", None))


def configure_jax(n):
    """Gives JAX at least n CPU devices (jax_num_cpu_devices) if its backend has not started yet.
    Returns True when JAX has (or will have) n CPU devices; otherwise records why not, which
    the functions that need them raise."""
    global _jax_note
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(r"--xla_force_host_platform_device_count=(\d+)", flags)
    if _backends_started():
        have = len(_jax_devices("cpu"))
        if have >= n:
            return True
        _jax_note = (f"JAX's CPU backend started with {have} device(s) before loom.jax could configure it, and "
                     f"lowering for {n} Loom devices needs {n}: call loom.jax.initialize() before the first JAX "
                     f"computation, or start Python with JAX_NUM_CPU_DEVICES={n} (or XLA_FLAGS="
                     f"--xla_force_host_platform_device_count={n})")
        return False
    if m:
        if int(m.group(1)) >= n:
            return True
        _jax_note = (f"XLA_FLAGS sets --xla_force_host_platform_device_count={m.group(1)}, fewer than the {n} CPU "
                     f"devices needed to lower for the cluster; raise it to {n}")
        return False
    cur = jax.config.jax_num_cpu_devices
    if cur is None or cur < n:
        jax.config.update("jax_num_cpu_devices", n)
    return True


def _need_cpu_devices(n):
    cpus = _jax_devices("cpu")
    if len(cpus) < n:
        raise RuntimeError(_jax_note or f"JAX has {len(cpus)} CPU devices; lowering for {n} Loom devices needs {n} "
                           f"(call loom.jax.initialize() before the first JAX computation)")
    return cpus


def initialize(address=None, *, proxy=None, keep_cpu=False, patch_jax=None, timeout=30.0):
    """Points JAX at the cluster. By default (patch_jax None) this is a thin helper: JAX's own
    IFRT proxy backend is aimed at the cluster's proxy (`proxy` as "HOST:PORT" or
    "grpc://HOST:PORT"; else $JAX_BACKEND_TARGET; else, when address and $LOOM_CONTROLLER are
    unset, the proxy the local `loom up` started), exactly what JAX_PLATFORMS=proxy and
    pathwaysutils.initialize() do. Plain jax.devices(), jax.jit, jax.pmap and NamedSharding then
    run on the cluster and return real jax.Arrays. keep_cpu also keeps JAX's CPU backend
    (jax.devices("cpu"): this host's CPU, for reference runs beside the cluster's). Returns the
    proxy target ("grpc://...").

    The fallback, used when no proxy is found or JAX's backend has already started (it cannot be
    switched then), and chosen explicitly with patch_jax=True or False: connect the default Loom
    client (address as for loom.connect), give JAX one CPU device per cluster device and, with
    patch_jax, route jax.devices(), jax.device_count(), jax.local_devices(),
    jax.local_device_count() and jax.pmap to the cluster (results are loom.Arrays). Returns the
    Client. The fallback warns (RuntimeWarning) when the default chose it."""
    if patch_jax is None:
        target, why = _proxy_target(address, proxy)
        if target is not None and not _backends_started():
            return use_proxy(target, keep_cpu=keep_cpu)
        if target is not None:
            why = ("JAX's backend had already started, so it cannot be pointed at the IFRT proxy "
                   f"{target} (call loom.jax.initialize() before the first JAX computation)")
        if proxy is not None:
            raise RuntimeError(f"loom.jax.initialize: {why}")
        warnings.warn(f"loom.jax.initialize: {why}; falling back to loom.jax's patched jax.devices()/jax.pmap "
                      f"(results are loom.Arrays)", RuntimeWarning, stacklevel=2)
        patch_jax = True
    return _initialize_client(address, patch_jax, timeout)


def use_proxy(target, *, keep_cpu=False):
    """Makes JAX's "proxy" backend (jaxlib's IFRT proxy client) its default and only one (with
    keep_cpu, CPU as a second) and aims it at target ("HOST:PORT" or "grpc://HOST:PORT"). Must
    run before JAX's backend starts. Loom's proxy
    speaks plain HTTP/2 (no TLS), so IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS is set unless the
    environment already sets it. Returns the target."""
    from jax.extend import backend
    from jax.extend.backend import ifrt_proxy
    if _backends_started():
        raise RuntimeError("loom.jax.use_proxy: JAX's backend has already started; call it before the first "
                           "JAX computation")
    if "://" not in target:
        target = "grpc://" + target
    os.environ.setdefault("IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS", "true")

    def make_client():
        return ifrt_proxy.get_client(target, ifrt_proxy.ClientConnectionOptions())

    jax.config.update("jax_platforms", "proxy,cpu" if keep_cpu else "proxy")
    jax.config.update("jax_backend_target", target)
    backend.register_backend_factory("proxy", make_client, priority=-1)
    return target


def _state_dir():
    d = os.environ.get("LOOM_STATE_DIR")
    if d:
        return d
    run = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(run, "loom") if run else f"/tmp/loom-{os.getuid()}"


def _proxy_target(address, proxy):
    """(target, None), or (None, why no proxy was found)."""
    if proxy:
        return proxy, None
    env = os.environ.get("JAX_BACKEND_TARGET")
    if env:
        return env, None
    if address is not None or os.environ.get("LOOM_CONTROLLER"):
        return None, ("no IFRT proxy was named for that cluster (pass proxy=\"HOST:PORT\" or set "
                      "JAX_BACKEND_TARGET)")
    state = os.path.join(_state_dir(), "cluster")
    try:
        with open(state) as f:
            rec = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None, f"no local cluster is running ({state} does not exist; start one with `loom up`)"
    if not rec.get("proxy"):
        return None, "the local cluster runs no IFRT proxy (`loom up --proxy-port 0`, or its port was taken)"
    return rec["proxy"], None


def _initialize_client(address, patch_jax, timeout):
    global _default
    with _lock:
        if _default is None or _default.closed:
            _default = Client(address, timeout=timeout, name="python (loom.jax)")
        if not configure_jax(_default.device_count()):
            warnings.warn(f"loom.jax: {_jax_note}; single-device jit works, pmap and shard_map over more "
                          f"devices will not", RuntimeWarning, stacklevel=3)
        if patch_jax:
            jax.devices, jax.device_count = devices, device_count
            jax.local_devices, jax.local_device_count = _local_devices, _local_device_count
            jax.pmap = pmap
        return _default


def client():
    """The default client (connected by initialize(), or on first use)."""
    c = _default
    if c is None or c.closed:
        c = _initialize_client(None, False, 30.0)
    return c


def _closed_default():
    global _default
    if _default is not None and not _default.closed:
        _default.close()
    _default = None


def devices(backend=None):
    """The cluster's devices (loom.Device). backend "cpu" etc. asks JAX for its own."""
    if backend not in (None, "loom"):
        return _jax_devices(backend)
    return client().devices()


def device_count(backend=None):
    if backend not in (None, "loom"):
        return _jax_device_count(backend)
    return client().device_count()


def _local_devices(process_index=None, backend=None, host_id=None):
    """jax.local_devices after initialize(): the one client process sees every cluster device."""
    if backend not in (None, "loom") or process_index not in (None, 0) or host_id not in (None, 0):
        return _jax_local_devices(process_index, backend, host_id)
    return devices()


def _local_device_count(backend=None):
    if backend not in (None, "loom"):
        return _jax_local_device_count(backend)
    return device_count()


def cpu_device(d):
    """The JAX CPU device that stands for Loom device d (a loom.Device or a virtual id)."""
    i = getattr(d, "id", d)
    return _need_cpu_devices(i + 1)[i]


def loom_device(jax_device):
    """The Loom device a JAX CPU device stands for."""
    return client().devices()[jax_device.id]


def Mesh(devices, axis_names):  # noqa: N802  (mirrors jax.sharding.Mesh)
    """A jax.sharding.Mesh over the cluster devices `devices` (an N-d array of loom.Devices or
    virtual ids, N = len(axis_names)), made of the CPU devices standing for them. Use it with
    NamedSharding, PartitionSpec and shard_map as with any JAX mesh."""
    arr = np.asarray(devices, dtype=object)
    ids = [getattr(d, "id", d) for d in arr.reshape(-1)]
    n = client().device_count()
    for i in ids:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise ValueError(f"{i!r} is not a device of the cluster (ids 0-{n - 1})")
    cpus = _need_cpu_devices(max(ids) + 1)
    return jax.sharding.Mesh(np.array([cpus[i] for i in ids], dtype=object).reshape(arr.shape), tuple(axis_names))


def make_mesh(axis_shapes, axis_names, devices=None):
    """A mesh of the given shape over `devices` (default: all cluster devices in id order),
    like jax.make_mesh."""
    devs = client().devices() if devices is None else list(devices)
    size = int(np.prod(axis_shapes))
    if size > len(devs):
        raise ValueError(f"a mesh of shape {tuple(axis_shapes)} needs {size} devices; the cluster has {len(devs)}")
    return Mesh(np.array(devs[:size], dtype=object).reshape(tuple(axis_shapes)), axis_names)


def put(x, sharding=None):
    """Puts x (numpy, JAX or loom array) on the cluster: sharding is a NamedSharding over a
    loom.jax mesh, a loom.Sharding, a device, or None (device 0)."""
    c = client()
    if isinstance(x, Array) and x.client is c:
        sh = c.sharding(sharding) or Sharding.single(0)
        if x.sharding.same_layout(sh, x.shape):
            return x
        x = x.numpy()
    return c.put(np.asarray(x), sharding)


device_put = put


# ---- lowering and running ----

_SCALARS = (bool, int, float, complex)


def _sharding_key(x):
    """The layout of a loom.Array over several devices (None on one device)."""
    sh = x.sharding
    return None if len(sh.devices) <= 1 else (sh.mesh_shape, sh.devices, sh.dim_axes)


def _leaf_key(x):
    t = type(x)
    if t is Array:
        k = _sharding_key(x)
        return (x.shape, x.dtype) if k is None else (x.shape, x.dtype, k)
    if t in _SCALARS:
        return t
    if t is np.ndarray or isinstance(x, np.generic):
        return (x.shape, x.dtype)
    dt = getattr(x, "dtype", None)
    if dt is not None and jax.dtypes.issubdtype(dt, jax.dtypes.prng_key):
        raise TypeError("typed PRNG key arrays cannot be passed to Loom; pass jax.random.key_data(key) "
                        "(or use jax.random.PRNGKey) and wrap it inside the function")
    if isinstance(x, jax.Array):
        return (x.shape, x.dtype, bool(getattr(x, "weak_type", False)))
    a = np.asarray(x)
    return (a.shape, a.dtype)


def _abstract(x):
    """What JAX lowers for a leaf: loom.Arrays become shape/dtype structs; other values are
    lowered as they are (only their types matter)."""
    if type(x) is Array:
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return x


def _abstract_sharded(x):
    """Like _abstract, but a loom.Array over several devices keeps its layout as a NamedSharding
    over the JAX CPU devices that stand for them: plain jit over sharded arrays lowers to an
    annotated global program, which Loom partitions."""
    if type(x) is not Array:
        return x
    sh = x.sharding
    if len(sh.devices) <= 1:
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    names = sh.axis_names or tuple(f"a{i}" for i in range(len(sh.mesh_shape)))
    devs = np.array([cpu_device(d) for d in sh.devices], dtype=object).reshape(sh.mesh_shape)
    mesh = jax.sharding.Mesh(devs, names)
    spec = [tuple(names[a] for a in ax) or None for ax in sh.dim_axes]
    spec += [None] * (len(x.shape) - len(spec))
    ns = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=ns)


class _Compiled:
    __slots__ = ("exe", "kept", "out_tree", "text")

    def __init__(self, exe, kept, out_tree, text):
        self.exe, self.kept, self.out_tree, self.text = exe, kept, out_tree, text


class LoomFunction:
    """A JAX function compiled for the cluster: call it like the function. One executable per
    input signature (tree structure, shapes, dtypes, static arguments), cached."""

    def __init__(self, kind, fun, make_lowerable, static_argnums=(), static_argnames=(), device=None):
        # make_lowerable() builds the JAX-transformed function (with .lower) on first use, once
        # the client is connected and JAX configured.
        self.kind, self.fun, self._make_lowerable, self._lowerable = kind, fun, make_lowerable, None
        self._static = tuple(sorted(static_argnums))
        self._static_names = frozenset(static_argnames)
        self._device = None if device is None else getattr(device, "id", device)
        # plain jit (no in_shardings, no device): sharded loom.Array arguments keep their layout
        self._keep_layouts = False
        self._cache = {}
        self.__name__ = getattr(fun, "__name__", kind)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun

    def _split(self, args, kwargs):
        if self._static:
            n = len(args)
            st = tuple(i + n if i < 0 else i for i in self._static)
            statics = tuple((i, args[i]) for i in st if i < n)
            args = tuple(a for i, a in enumerate(args) if i not in st)
        else:
            statics = ()
        if self._static_names and kwargs:
            skw = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names))
            kwargs = {k: v for k, v in kwargs.items() if k not in self._static_names}
            statics = statics + skw
        return args, kwargs, statics

    def _prepare(self, args, kwargs):
        dyn_args, dyn_kwargs, statics = self._split(args, kwargs)
        leaves, tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        key = (tree, statics, tuple(_leaf_key(x) for x in leaves))
        comp = self._cache.get(key)
        if comp is None:
            comp = self._compile(args, kwargs, leaves, tree)
            self._cache[key] = comp
        return comp, leaves

    def lower(self, *args, **kwargs):
        """The StableHLO text this call would run."""
        return self._lower(args, kwargs)[0].as_text()

    def _lower(self, args, kwargs):
        st = {i + len(args) if i < 0 else i for i in self._static}
        is_arr = lambda x: type(x) is Array  # noqa: E731
        ab = _abstract_sharded if self._keep_layouts else _abstract
        largs = tuple(a if i in st else tree_util.tree_map(ab, a, is_leaf=is_arr) for i, a in enumerate(args))
        lkw = {k: v if k in self._static_names else tree_util.tree_map(ab, v, is_leaf=is_arr)
               for k, v in kwargs.items()}
        client()  # connects and configures JAX before anything lowers
        if self._lowerable is None:
            self._lowerable = self._make_lowerable()
        try:
            with jax.default_device(_jax_devices("cpu")[0]):
                lowered = self._lowerable.lower(*largs, **lkw)
        except Exception as e:
            if _jax_note and (self.kind != "jit" or "devices" in str(e)):  # JAX lacks the CPU devices
                raise RuntimeError(f"{self.kind}({self.__name__}): {_jax_note}") from e
            raise
        return lowered, largs

    def _compile(self, args, kwargs, leaves, tree):
        c = client()
        lowered, _ = self._lower(args, kwargs)
        low = getattr(lowered, "_lowering", None)
        cargs = getattr(low, "compile_args", None)
        if cargs is None or "kept_var_idx" not in cargs or not hasattr(low, "_device_list"):
            raise errors.UnsupportedError(
                f"loom.jax does not know how this JAX ({jax.__version__}) records a lowering's kept arguments and "
                f"devices")
        if getattr(low, "const_args", None):
            raise errors.UnsupportedError(
                f"{self.kind}({self.__name__}): JAX passes {len(low.const_args)} closed-over constant(s) as extra "
                f"arguments, which loom.jax does not feed yet; pass them as arguments")
        in_tree = lowered.in_tree
        if in_tree != tree:
            raise errors.InternalError(f"loom.jax: the lowering's input structure {in_tree} differs from the "
                                       f"call's {tree}")
        kept = sorted(cargs["kept_var_idx"])
        devs = [d.id for d in low._device_list]
        if len(devs) == 1 and self._device is not None:
            devs = [self._device]
        n = c.device_count()
        bad = [d for d in devs if d >= n]
        if bad:
            raise errors.InvalidArgumentError(
                f"{self.kind}({self.__name__}) runs on {len(devs)} devices, the cluster has {n}")
        text = lowered.as_text()
        exe = c.compile(text, devs, name=f"{self.kind}({self.__name__})")
        if exe._h.num_inputs != len(kept) or exe._h.num_outputs != lowered.out_tree.num_leaves:
            raise errors.InternalError(
                f"loom.jax: {self.__name__}: the program takes {exe._h.num_inputs} inputs and returns "
                f"{exe._h.num_outputs}; JAX kept {len(kept)} and expects {lowered.out_tree.num_leaves}")
        return _Compiled(exe, kept, lowered.out_tree, text)

    def __call__(self, *args, **kwargs):
        comp, leaves = self._prepare(args, kwargs)
        outs, _ = comp.exe.launch(*[leaves[i] for i in comp.kept])
        return tree_util.tree_unflatten(comp.out_tree, outs)

    def launch(self, *args, **kwargs):
        """Like calling it, but also returns the launch's loom.Future: (outputs, future)."""
        comp, leaves = self._prepare(args, kwargs)
        outs, fut = comp.exe.launch(*[leaves[i] for i in comp.kept])
        return tree_util.tree_unflatten(comp.out_tree, outs), fut

    def executable(self, *args, **kwargs):
        """The loom.Executable a call with these arguments runs."""
        return self._prepare(args, kwargs)[0].exe

    def __repr__(self):
        return f"<loom.jax.{self.kind} of {self.__name__}>"


def jit(fun=None, *, static_argnums=(), static_argnames=(), device=None, **jit_kwargs):
    """Compiles fun for one cluster device (`device`: a loom.Device or id; default 0). Extra
    keyword arguments go to jax.jit (in_shardings etc.: with NamedShardings the global program is
    partitioned by Loom over the mesh's devices). Without in_shardings and device, loom.Array
    arguments laid out over several devices keep their layout, and the program is partitioned. A function that is a jax.shard_map (see
    shard_map) runs on its mesh's devices instead."""
    if fun is None:
        return lambda f: jit(f, static_argnums=static_argnums, static_argnames=static_argnames, device=device,
                             **jit_kwargs)
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    lf = LoomFunction("jit", fun, lambda: jax.jit(fun, static_argnums=static_argnums,
                                                  static_argnames=static_argnames, **jit_kwargs),
                      static_argnums, static_argnames, device)
    lf._keep_layouts = device is None and "in_shardings" not in jit_kwargs
    return lf


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         **pmap_kwargs):
    """jax.pmap on the cluster: the function runs once per device over the leading axis of its
    mapped inputs (size <= the number of devices), with collectives over axis_name. devices:
    loom.Devices or ids to use (default: the first ones)."""
    if fun is None:
        return lambda f: pmap(f, axis_name, in_axes=in_axes, out_axes=out_axes,
                              static_broadcasted_argnums=static_broadcasted_argnums, devices=devices, **pmap_kwargs)
    if isinstance(static_broadcasted_argnums, int):
        static_broadcasted_argnums = (static_broadcasted_argnums,)

    def make():
        kw = dict(pmap_kwargs)
        if devices is not None:
            kw["devices"] = [cpu_device(d) for d in devices]
        else:
            kw.setdefault("backend", "cpu")
        return _jax_pmap(fun, axis_name, in_axes=in_axes, out_axes=out_axes,
                         static_broadcasted_argnums=static_broadcasted_argnums, **kw)

    return LoomFunction("pmap", fun, make, static_broadcasted_argnums)


def shard_map(fun=None, *, mesh, in_specs, out_specs, check_vma=True, **kwargs):
    """jax.shard_map over a loom.jax mesh, run on the mesh's cluster devices: fun sees each
    device's shards (as in_specs split the inputs) and may use collectives over the mesh axes
    (psum, all_gather, psum_scatter, ppermute, all_to_all, ...)."""
    if fun is None:
        return lambda f: shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma,
                                   **kwargs)
    return LoomFunction("shard_map", fun, lambda: jax.jit(jax.shard_map(
        fun, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma, **kwargs)))

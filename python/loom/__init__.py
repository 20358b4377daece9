"""Loom from Python: connect to a cluster, see its devices as one machine, put numpy arrays on
them (sharded), compile StableHLO programs once and run them on every device asynchronously.
loom.jax lowers JAX functions (jit, pmap, shard_map) and runs them on the cluster.

    import loom, numpy as np
    client = loom.connect()                 # $LOOM_CONTROLLER, else the local `loom up` cluster
    print(client.devices())
    x = client.put(np.arange(8.0), loom.Sharding.tiled(range(8)))
    exe = client.compile(open("prog.mlir").read())
    y = exe(x)                              # asynchronous; y.numpy() waits and fetches
"""
from . import _loom
from .errors import *  # noqa: F401,F403  (LoomError and one class per status)
from .errors import LoomError, error_class  # noqa: F401
from .sharding import Sharding
from .client import Array, ArraySpec, Client, Device, Executable, Future, connect

__version__ = "0.1.0"
__all__ = ["connect", "Client", "Device", "Array", "ArraySpec", "Executable", "Future", "Sharding", "LoomError",
           "error_class", "libloom_version"]


def libloom_version():
    """The version of the libloom this package runs over."""
    return _loom.version()

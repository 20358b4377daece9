"""How an array is laid out over devices: loom.Sharding mirrors loom.h's loom_sharding, a device
mesh (an N-d grid of virtual device ids, row-major) and, for each array dimension, the mesh axes
it is split over (major to minor); axes no dimension uses replicate. This is the information of
a JAX NamedSharding: Sharding.named(devices, axis_names, PartitionSpec) builds one."""
import itertools
import math

import numpy as np


def _device_id(d):
    i = getattr(d, "id", d)
    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"a device must be a loom device or an int id, not {type(d).__name__}")
    return int(i)


class Sharding:
    """A layout over devices. `mesh_shape` (tuple of axis sizes), `devices` (virtual ids, mesh
    row-major), `dim_axes` (per array dimension, a tuple of mesh axis indices), and optional
    `axis_names` (for printing and for PartitionSpecs)."""

    __slots__ = ("mesh_shape", "devices", "dim_axes", "axis_names")

    def __init__(self, mesh_shape, devices, dim_axes=(), axis_names=None):
        mesh_shape = tuple(int(s) for s in mesh_shape)
        devices = tuple(_device_id(d) for d in np.asarray(devices, dtype=object).reshape(-1))
        if any(s < 1 for s in mesh_shape):
            raise ValueError(f"mesh axis sizes must be >= 1, got {mesh_shape}")
        if math.prod(mesh_shape) != len(devices):
            raise ValueError(f"a mesh of shape {mesh_shape} needs {math.prod(mesh_shape)} devices, got {len(devices)}")
        if len(set(devices)) != len(devices):
            raise ValueError(f"devices repeat in {devices}")
        axes = [tuple(int(a) for a in ax) for ax in dim_axes]
        used = [a for ax in axes for a in ax]
        if any(a < 0 or a >= len(mesh_shape) for a in used):
            raise ValueError(f"dim_axes {axes} name an axis outside a mesh of rank {len(mesh_shape)}")
        if len(set(used)) != len(used):
            raise ValueError(f"a mesh axis splits more than one dimension in {axes}")
        while axes and not axes[-1]:
            axes.pop()
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise ValueError(f"{len(axis_names)} axis names for a mesh of rank {len(mesh_shape)}")
        self.mesh_shape, self.devices, self.dim_axes, self.axis_names = mesh_shape, devices, tuple(axes), axis_names

    # ---- constructors ----
    @classmethod
    def single(cls, device):
        """The whole array on one device."""
        return cls((), (device,))

    @classmethod
    def replicated(cls, devices):
        """A full copy on each device."""
        devices = list(devices)
        return cls((len(devices),), devices)

    @classmethod
    def tiled(cls, devices, dim=0):
        """Dimension `dim` split into len(devices) equal shards, shard i on devices[i]."""
        devices = list(devices)
        axes = [()] * dim + [(0,)]
        return cls((len(devices),), devices, axes)

    @classmethod
    def named(cls, devices, axis_names, spec):
        """From a mesh (an N-d array of devices with N axis names) and a PartitionSpec-like
        sequence: entry d is None, an axis name or a tuple of names (major to minor)."""
        arr = np.asarray(devices, dtype=object)
        axis_names = tuple(axis_names)
        if arr.ndim != len(axis_names):
            raise ValueError(f"a mesh of rank {arr.ndim} with {len(axis_names)} axis names")
        index = {n: i for i, n in enumerate(axis_names)}
        dim_axes = []
        for entry in tuple(spec):
            names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
            try:
                dim_axes.append(tuple(index[n] for n in names))
            except KeyError as e:
                raise ValueError(f"PartitionSpec {tuple(spec)} names axis {e.args[0]!r}, not in the mesh's "
                                 f"{axis_names}") from None
        return cls(arr.shape, arr.reshape(-1), dim_axes, axis_names)

    # ---- queries ----
    @property
    def num_devices(self):
        return len(self.devices)

    @property
    def is_replicated(self):
        return not self.dim_axes

    def spec(self):
        """The PartitionSpec-like tuple (axis names, or axis indices without names)."""
        name = (lambda a: self.axis_names[a]) if self.axis_names else (lambda a: a)
        return tuple(None if not ax else name(ax[0]) if len(ax) == 1 else tuple(name(a) for a in ax)
                     for ax in self.dim_axes)

    def dim_parts(self, d):
        """How many shards dimension d is split into."""
        ax = self.dim_axes[d] if d < len(self.dim_axes) else ()
        return math.prod(self.mesh_shape[a] for a in ax)

    def check(self, shape):
        """Raises ValueError unless this sharding divides `shape` evenly."""
        shape = tuple(shape)
        if len(self.dim_axes) > len(shape):
            raise ValueError(f"sharding {self} splits dimension {len(self.dim_axes) - 1} of a rank-{len(shape)} array")
        for d, n in enumerate(shape):
            k = self.dim_parts(d)
            if n % k:
                raise ValueError(f"dimension {d} (size {n}) does not split into {k} equal shards")

    def shard_shape(self, shape):
        self.check(shape)
        return tuple(n // self.dim_parts(d) for d, n in enumerate(shape))

    def shards(self, shape):
        """[(device, offsets)] in mesh order: where each device's shard starts."""
        sshape = self.shard_shape(shape)
        out = []
        for pos, dev in zip(itertools.product(*(range(s) for s in self.mesh_shape)), self.devices):
            offs = []
            for d in range(len(sshape)):
                idx = 0
                for a in (self.dim_axes[d] if d < len(self.dim_axes) else ()):
                    idx = idx * self.mesh_shape[a] + pos[a]
                offs.append(idx * sshape[d])
            out.append((dev, tuple(offs)))
        return out

    def same_layout(self, other, shape):
        """True when both put the same part of an array of `shape` on the same devices."""
        if self == other:
            return True
        try:
            return sorted(self.shards(shape)) == sorted(other.shards(shape)) and \
                self.shard_shape(shape) == other.shard_shape(shape)
        except ValueError:
            return False

    def _c(self):
        """The tuple loom._loom takes."""
        return (self.mesh_shape, self.devices, self.dim_axes)

    @classmethod
    def _from_c(cls, t):
        mesh, devs, axes = t
        return cls(mesh, devs, axes)

    def __eq__(self, other):
        return isinstance(other, Sharding) and self._c() == other._c()

    def __hash__(self):
        return hash(self._c())

    def __repr__(self):
        if not self.mesh_shape:
            return f"Sharding.single({self.devices[0]})"
        names = f", axis_names={self.axis_names}" if self.axis_names else ""
        return f"Sharding(mesh_shape={self.mesh_shape}, devices={list(self.devices)}, spec={self.spec()}{names})"

"""Data-parallel inference over the observation axis with ``jax.sharding``, on one host or many.

The data arrays whose first axis is ``n`` (the observations) and the local latents (those
with the axis ``n``: ``z1..zL`` of the sparse gamma DEF, ``z`` of the beta-gamma MF) are
split by rows over a one-dimensional device mesh; the global latents (the weights) are
replicated. The variational parameters and the optimizer state follow the same layout.
:func:`grepvi.inference.state.step` is compiled once with those shardings (``jax.jit``, GSPMD):
every device draws and differentiates its own rows of its own data, and XLA inserts the
all-reduce that sums the weights' gradients over the devices. The program is the
single-device one, so the result is the same up to the order of float sums
(``jax_threefry_partitionable`` makes the random draws independent of the layout; on by
default since JAX 0.5).

The same code runs on one CPU, one GPU, several devices of one host, or several hosts:

* one host: a one-device mesh is a no-op; ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
  (set before JAX starts) gives a CPU four devices to try it on;
* several hosts (or processes): call ``jax.distributed.initialize(coordinator_address,
  num_processes, process_id)`` first in every process, then build the mesh over
  ``jax.devices()`` (all processes' devices). :func:`place_data` takes each process's own
  rows (process ``p`` of ``P`` holds rows ``p N/P .. (p+1) N/P - 1``,
  :func:`process_rows`) and assembles the global arrays
  (``jax.make_array_from_process_local_data``); the state, identical in every process (the
  same seed), is laid out from the full arrays. README: "Many devices and many hosts".

The number of observations must be a multiple of the number of devices.

Example::

    >>> import jax, numpy as np, grepvi
    >>> from grepvi.models import sparse_gamma_def
    >>> from grepvi.inference.sharding import data_parallel
    >>> model = sparse_gamma_def(np.ones((8, 5)), layer_sizes=(3, 2))
    >>> target = model.target()
    >>> optimizer = grepvi.advi_stepsize(0.1)
    >>> estimator = grepvi.get_estimator("grep")
    >>> state = grepvi.init(jax.random.key(0), target, optimizer)
    >>> parallel = data_parallel(target, estimator, optimizer, model)
    >>> state, data = parallel.place_state(state), parallel.place_data(model.data)
    >>> state, info = parallel.step(state, data)
    >>> int(state.iteration)
    1
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from grepvi.errors import ConfigError
from grepvi.estimators.base import Estimator
from grepvi.inference.state import VIState, step
from grepvi.target import Target

__all__ = [
    "make_mesh",
    "state_shardings",
    "data_shardings",
    "process_rows",
    "DataParallel",
    "data_parallel",
]

AXIS_NAME = "n"


def make_mesh(devices: Sequence | None = None, axis_name: str = AXIS_NAME) -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: all of ``jax.devices()``, every
    process's under ``jax.distributed``)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ConfigError("make_mesh: expected at least one device, got none")
    return Mesh(np.array(devices), (axis_name,))


def _latent_of(path, names):
    for entry in path:
        key = getattr(entry, "key", None)
        if key in names:
            return key
    return None


def _split_or_replicate(what: str, rows: int | None, mesh: Mesh):
    (axis_name,) = mesh.axis_names
    if rows is None:
        return NamedSharding(mesh, PartitionSpec())
    if rows % mesh.devices.size:
        raise ConfigError(
            f"{what}: {rows} rows do not split evenly over {mesh.devices.size} devices; "
            "use a number of observations that is a multiple of the device count"
        )
    return NamedSharding(mesh, PartitionSpec(axis_name))


def state_shardings(state: VIState, local_latent_names: Sequence[str], mesh: Mesh) -> VIState:
    """A pytree of ``NamedSharding`` like ``state``: rows of local latents split, rest replicated.

    A leaf is split along its first axis when it sits under a local latent's name (its
    parameters, and the optimizer's per-parameter statistics, which optax keys the same way)
    and has at least one axis; every other leaf (weights, counters, the key) is replicated.

    Raises:
      ConfigError: a local latent's number of rows is not a multiple of the mesh size.
    """
    names = set(local_latent_names)

    def choose(path, leaf):
        latent = _latent_of(path, names)
        rows = None if latent is None or np.ndim(leaf) == 0 else np.shape(leaf)[0]
        return _split_or_replicate(f"latent {latent!r}", rows, mesh)

    return jax.tree_util.tree_map_with_path(choose, state)


def data_shardings(data: dict, data_axes: dict, mesh: Mesh, num_rows: int | None = None) -> dict:
    """``NamedSharding`` of every data array: split by rows when its first axis is ``n``.

    ``num_rows``: the global number of rows (default: the arrays' own)."""
    out = {}
    for name, value in data.items():
        by_rows = tuple(data_axes.get(name, ()))[:1] == (AXIS_NAME,)
        rows = (num_rows or np.shape(value)[0]) if by_rows else None
        out[name] = _split_or_replicate(f"data {name!r}", rows, mesh)
    return out


def process_rows(num_rows: int, process_index: int | None = None, process_count: int | None = None) -> slice:
    """The rows a process holds: process ``p`` of ``P`` gets ``p N/P .. (p+1) N/P - 1``.

    The device order of :func:`make_mesh` (``jax.devices()``: by process, then local
    device) makes these the rows of its own devices."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if num_rows % count:
        raise ConfigError(f"data: {num_rows} rows do not split evenly over {count} processes")
    size = num_rows // count
    return slice(index * size, (index + 1) * size)


class DataParallel(NamedTuple):
    """What :func:`data_parallel` returns.

    Attributes:
      place_state: ``state -> state`` laid out over the mesh (:func:`state_shardings`).
      place_data: ``data -> data`` laid out over the mesh; under several processes, each
        passes its own rows (:func:`process_rows`) of the arrays split by rows.
      step: ``(state, data) -> (state, info)``, :func:`grepvi.inference.state.step` compiled for
        the layout (the new state keeps it).
      mesh: the device mesh.
    """

    place_state: Callable
    place_data: Callable
    step: Callable
    mesh: Mesh


def data_parallel(
    target: Target,
    estimator: Estimator,
    optimizer,
    model=None,
    mesh: Mesh | None = None,
    *,
    local_latent_names: Sequence[str] | None = None,
    data_axes: dict | None = None,
) -> DataParallel:
    """The data-parallel step of ``target`` over ``mesh`` (default: every device).

    Args:
      target: the target (``model.target()``: functions of ``(latents, data)``).
      estimator, optimizer: as for :func:`grepvi.inference.state.step`.
      model: a :class:`~grepvi.models.Model`: its local latents and data axes (else give
        ``local_latent_names`` and ``data_axes``).
      mesh: a one-dimensional mesh (:func:`make_mesh`).
    """
    mesh = make_mesh() if mesh is None else mesh
    if model is not None:
        local_latent_names = model.local_latent_names if local_latent_names is None else local_latent_names
        data_axes = model.data_axes if data_axes is None else data_axes
    local_latent_names = tuple(local_latent_names or ())
    data_axes = dict(data_axes or {})
    missing = sorted(set(local_latent_names) - set(target.families))
    if missing:
        raise ConfigError(f"local_latent_names: {missing} are not latents of the target")
    layout = {}

    def place_state(state):
        shardings = state_shardings(state, local_latent_names, mesh)
        layout["state"] = shardings
        return _put(state, shardings)

    def place_data(data):
        if data is None:
            return None
        count = jax.process_count()
        rows = {name: np.shape(v)[0] * count for name, v in data.items() if np.ndim(v)}
        shardings = {n: data_shardings({n: v}, data_axes, mesh, rows.get(n))[n] for n, v in data.items()}
        layout["data"] = shardings
        if count == 1:
            return jax.device_put(data, shardings)
        return {
            name: jax.make_array_from_process_local_data(
                shardings[name], np.asarray(value), (rows[name],) + tuple(np.shape(value)[1:])
            )
            if shardings[name].spec != PartitionSpec()
            else _put(value, shardings[name])
            for name, value in data.items()
        }

    def body(state, data):
        new_state, info = step(state, target, estimator, optimizer, data)
        return jax.lax.with_sharding_constraint(new_state, layout["state"]), info

    compiled = {}

    def sharded_step(state, data=None):
        if "state" not in layout:
            state = place_state(state)
        if "step" not in compiled:
            compiled["step"] = jax.jit(body)
        return compiled["step"](state, data)

    return DataParallel(place_state, place_data, sharded_step, mesh)


def _put(tree, shardings):
    """``jax.device_put`` of host values that are the same in every process (one process:
    plain placement; several: each process places its devices' part of the same value)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(value, sharding):
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            impl = jax.random.key_impl(value)
            return jax.random.wrap_key_data(one(jax.random.key_data(value), sharding), impl=impl)
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree_util.tree_map(one, tree, shardings)

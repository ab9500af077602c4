"""Data-parallel inference over the observation axis with ``jax.sharding``.

The local latents of a model (those with the observation axis ``n``: ``z1..zL`` of the sparse
gamma DEF, ``z`` of the beta-gamma MF) are split by rows over a one-dimensional device mesh;
the global latents (the weights) are replicated. Their variational parameters and optimizer
state follow the same layout. :func:`grepvi.inference.step` is then compiled once with those
input shardings (``jax.jit``, GSPMD): every device draws and differentiates its own rows,
and XLA inserts the all-reduce that sums the weights' gradients over the devices. The
program is the single-device one, so the result is the same up to the order of float sums
(``jax_threefry_partitionable`` makes the random draws independent of the layout; it is on
by default since JAX 0.5).

The same code runs on one CPU, one GPU or several devices (a one-device mesh is a no-op);
on a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (set before JAX starts)
gives four devices to try it on.

Limitations: the models bind their data as constants of the log joint, which every device
then holds in full (XLA slices it per device); sharding the data too needs the log joint to
take the data as an argument. The number of observations must be a multiple of the number
of devices.

Example::

    >>> import jax, numpy as np, grepvi
    >>> from grepvi.models import sparse_gamma_def
    >>> from grepvi.sharding import data_parallel
    >>> model = sparse_gamma_def(np.ones((8, 5)), layer_sizes=(3, 2))
    >>> target = model.target()
    >>> optimizer = grepvi.optim.advi_stepsize(0.1)
    >>> estimator = grepvi.get_estimator("grep")
    >>> state = grepvi.inference.init(jax.random.key(0), target, optimizer)
    >>> place, step = data_parallel(target, estimator, optimizer, model.local_latent_names)
    >>> state, info = step(place(state))
    >>> int(state.iteration)
    1
"""

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from grepvi.errors import ConfigError
from grepvi.estimators.base import Estimator, Target
from grepvi.inference import VIState, step

__all__ = ["make_mesh", "state_shardings", "data_parallel"]

AXIS_NAME = "n"


def make_mesh(devices: Sequence | None = None, axis_name: str = AXIS_NAME) -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: all of ``jax.devices()``)."""
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


def state_shardings(state: VIState, local_latent_names: Sequence[str], mesh: Mesh) -> VIState:
    """A pytree of ``NamedSharding`` like ``state``: rows of local latents split, rest replicated.

    A leaf is split along its first axis when it sits under a local latent's name (its
    parameters, and the optimizer's per-parameter statistics, which optax keys the same way)
    and has at least one axis; every other leaf (weights, counters, the key) is replicated.

    Raises:
      ConfigError: a local latent's number of rows is not a multiple of the mesh size.
    """
    (axis_name,) = mesh.axis_names
    num_devices = mesh.devices.size
    names = set(local_latent_names)
    replicated = NamedSharding(mesh, PartitionSpec())
    split = NamedSharding(mesh, PartitionSpec(axis_name))

    def choose(path, leaf):
        latent = _latent_of(path, names)
        if latent is None or np.ndim(leaf) == 0:
            return replicated
        rows = np.shape(leaf)[0]
        if rows % num_devices:
            raise ConfigError(
                f"latent {latent!r}: {rows} rows do not split evenly over {num_devices} devices; "
                "use a number of observations that is a multiple of the device count"
            )
        return split

    return jax.tree_util.tree_map_with_path(choose, state)


def data_parallel(
    target: Target,
    estimator: Estimator,
    optimizer,
    local_latent_names: Sequence[str],
    mesh: Mesh | None = None,
) -> tuple[Callable[[VIState], VIState], Callable[[VIState], tuple]]:
    """``(place, sharded_step)``: lay a state out over ``mesh``, and a jitted sharded step.

    ``place(state)`` moves ``state`` to its layout (:func:`state_shardings`);
    ``sharded_step(state)`` is :func:`grepvi.inference.step` compiled for that layout (the
    new state keeps it). The step is traced on the first call.
    """
    mesh = make_mesh() if mesh is None else mesh
    missing = sorted(set(local_latent_names) - set(target.families))
    if missing:
        raise ConfigError(f"local_latent_names: {missing} are not latents of the target")
    layout = {}

    def place(state):
        shardings = state_shardings(state, local_latent_names, mesh)
        layout["shardings"] = shardings
        return jax.device_put(state, shardings)

    def body(state):
        new_state, info = step(state, target, estimator, optimizer)
        return jax.lax.with_sharding_constraint(new_state, layout["shardings"]), info

    compiled = {}

    def sharded_step(state):
        if "shardings" not in layout:
            state = place(state)
        if "step" not in compiled:
            compiled["step"] = jax.jit(body, in_shardings=(layout["shardings"],))
        return compiled["step"](state)

    return place, sharded_step

"""Models as lists of factors over named axes; Markov blankets read off the axes.

The log joint of a model is a sum of *factors*. A factor is a function of the dict of latent
arrays that returns one log-density term per element of an array over *named axes*: the
Poisson likelihood of the sparse gamma DEF is the factor over ``("n", "d")`` with elements
``log p(x_nd | z1_n, W0_:d)``. Every latent names the axes of its array too (``z1`` has
``("n", "k1")``, ``W0`` has ``("k1", "d")``), and the axes say which elements can touch which:

    element ``a`` of a factor depends on element ``b`` of a latent only if they agree on
    every axis name they share (axes a factor contracts over, like ``k1`` in ``z1 @ W0``,
    are not axes of the factor).

This is the plate idea of Pyro and NumPyro. It gives each latent element ``i`` its *local
log joint* (the terms of its Markov blanket, paper Section 3, ``f_i`` in ``g_corr``)
mechanically:

    local[latent] = sum over the factors that read the latent of
                    (the factor summed over its axes the latent lacks,
                     broadcast over the latent's axes the factor lacks).

Which latents a factor reads is found by tracing it once (``jax.make_jaxpr``) when the model
is built, so there is nothing to declare and nothing to get out of sync. What the trace
cannot check is the axes rule above: a factor over ``("n",)`` that sums a latent over ``n``
breaks it, and its local log joints would miss terms (the gradient estimates would then be
biased). :func:`check_local_log_joints` tests a model against the brute-force definition
(change one element, recompute the whole log joint) and is cheap on a small instance.

The three functions built from the factors evaluate every factor once per call:
``logdensity_fn`` (the scalar log joint), ``local_logdensity_fn`` (a dict of per-element
local log joints, each with its latent's batch shape) and ``logdensity_and_local_fn`` (both
from one evaluation of the factors: under ``jax.jit`` the shared work, e.g. the ``(N, D)``
Poisson rate matrix, is done once).

Example, a small Poisson factorization ``x_nd ~ Poisson(theta_n beta_d)`` with
``Gamma(1, 1)`` priors (the log joint up to constants)::

    >>> import jax.numpy as jnp
    >>> from grepvi.models import Factor, log_joint
    >>> counts = jnp.array([[1.0, 0.0, 3.0], [2.0, 5.0, 0.0]])  # (n, d)
    >>> def likelihood(z):
    ...     rate = z["theta"][:, None] * z["beta"][None, :]
    ...     return counts * jnp.log(rate) - rate
    >>> joint = log_joint(
    ...     [
    ...         Factor("likelihood", ("n", "d"), likelihood),
    ...         Factor("theta_prior", ("n",), lambda z: -z["theta"]),
    ...         Factor("beta_prior", ("d",), lambda z: -z["beta"]),
    ...     ],
    ...     latent_axes={"theta": ("n",), "beta": ("d",)},
    ...     axis_sizes={"n": 2, "d": 3},
    ... )
    >>> joint.blankets["theta"]
    ('likelihood', 'theta_prior')
    >>> local = joint.local_logdensity_fn({"theta": jnp.ones(2), "beta": jnp.ones(3)})
    >>> [round(float(v), 1) for v in local["theta"]]  # row sums of -1 per entry, minus 1
    [-4.0, -4.0]

Fit it with ``grepvi.fit(joint.logdensity_fn, {"theta": grepvi.Gamma((2,)), "beta":
grepvi.Gamma((3,))}, local_logdensity_fn=joint.local_logdensity_fn)``.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import DataError, ModelError
from grepvi.estimators.base import Target
from grepvi.families.base import Family

__all__ = [
    "Factor",
    "LogJoint",
    "log_joint",
    "Model",
    "check_local_log_joints",
    "LocalCheck",
    "gamma_log_density",
    "observation_matrix",
]


class Factor(NamedTuple):
    """A term of the log joint: ``fn(latents)`` is an array over the named ``axes``.

    Attributes:
      name: unique name (used in messages and in ``LogJoint.blankets``).
      axes: names of the output's axes, one per dimension (``()`` for a scalar term).
      fn: maps the dict of latent arrays to the array of log-density terms; the factor's
        contribution to the log joint is the sum of its elements.
    """

    name: str
    axes: tuple[str, ...]
    fn: Callable[[dict], jax.Array]


class LogJoint(NamedTuple):
    """The log joint built from factors, and the structure read off their axes.

    Attributes:
      logdensity_fn: ``latents -> scalar`` log joint (sum of all factors).
      local_logdensity_fn: ``latents -> {name: local log joint}`` with each latent's batch
        shape (its axes without the event axes).
      logdensity_and_local_fn: ``latents -> (scalar, dict)``, both from one evaluation.
      factor_values_fn: ``latents -> {factor name: array}``.
      factors: the factors, in order.
      latent_axes: each latent's axes (all of its array's dimensions).
      local_axes: each latent's batch axes (``latent_axes`` without the event axes).
      axis_sizes: the size of every axis.
      dependencies: for each factor, the latents it reads (from tracing it).
      blankets: for each latent, the factors that read it (its Markov blanket).
    """

    logdensity_fn: Callable[[dict], jax.Array]
    local_logdensity_fn: Callable[[dict], dict]
    logdensity_and_local_fn: Callable[[dict], tuple[jax.Array, dict]]
    factor_values_fn: Callable[[dict], dict]
    factors: tuple[Factor, ...]
    latent_axes: dict[str, tuple[str, ...]]
    local_axes: dict[str, tuple[str, ...]]
    axis_sizes: dict[str, int]
    dependencies: dict[str, tuple[str, ...]]
    blankets: dict[str, tuple[str, ...]]

    def latent_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.axis_sizes[axis] for axis in self.latent_axes[name])


def _check_axes(axes, what: str) -> tuple[str, ...]:
    if isinstance(axes, str):
        raise ModelError(f"{what}: axes must be a tuple of axis names, got the string {axes!r}")
    try:
        axes = tuple(axes)
    except TypeError as error:
        raise ModelError(f"{what}: axes must be a tuple of axis names, got {axes!r}") from error
    if not all(isinstance(axis, str) and axis for axis in axes):
        raise ModelError(f"{what}: axes must be non-empty strings, got {axes!r}")
    if len(set(axes)) != len(axes):
        raise ModelError(f"{what}: an axis name appears twice in {axes!r}")
    return axes


def _used_inputs(closed_jaxpr, names: Sequence[str]) -> tuple[str, ...]:
    """The names of the flattened inputs that some equation (or the output) reads."""
    by_id = {id(var): name for var, name in zip(closed_jaxpr.jaxpr.invars, names, strict=True)}
    used = set()
    for eqn in closed_jaxpr.jaxpr.eqns:
        for var in eqn.invars:
            if id(var) in by_id:
                used.add(by_id[id(var)])
    for var in closed_jaxpr.jaxpr.outvars:
        if id(var) in by_id:
            used.add(by_id[id(var)])
    return tuple(name for name in names if name in used)


def _reducer(factor_axes, local_axes, axis_sizes):
    """Maps a factor's values to a latent's local axes: sum, transpose, insert unit axes."""
    sum_axes = tuple(i for i, axis in enumerate(factor_axes) if axis not in local_axes)
    kept = [axis for axis in factor_axes if axis in local_axes]
    order = [kept.index(axis) for axis in local_axes if axis in kept]
    shape = tuple(axis_sizes[axis] if axis in kept else 1 for axis in local_axes)

    def reduce(value):
        if sum_axes:
            value = jnp.sum(value, axis=sum_axes)
        if order != sorted(order):
            value = jnp.transpose(value, order)
        return jnp.reshape(value, shape)

    return reduce


def log_joint(
    factors: Sequence[Factor],
    latent_axes: Mapping[str, Sequence[str]],
    axis_sizes: Mapping[str, int],
    event_ndims: Mapping[str, int] | None = None,
) -> LogJoint:
    """Builds the log joint and the local log joints of a model given as factors.

    Args:
      factors: the terms of the log joint (:class:`Factor`); a factor that reads no latent
        is a constant, kept in the log joint.
      latent_axes: each latent's name mapped to the names of its array's axes.
      axis_sizes: the size of every axis named by a latent or a factor.
      event_ndims: for latents whose families have event axes (``Dirichlet``: 1), how many
        trailing axes form one variational element; their local log joints have the
        remaining (batch) axes. Default 0.

    Returns:
      A :class:`LogJoint`.

    Raises:
      ModelError: axes or sizes that do not fit, a factor whose output does not have the
        shape of its axes, a factor that fails on latents of the declared shapes, or a
        latent that no factor reads.
    """
    factors = tuple(factors)
    if not factors:
        raise ModelError("factors: expected at least one factor, got none")
    for item in factors:
        if not isinstance(item, Factor):
            raise ModelError(f"factors: expected grepvi.models.Factor items, got {item!r}")
    names = [item.name for item in factors]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ModelError(f"factors: names must be unique, {duplicates} appear more than once")
    if not latent_axes:
        raise ModelError("latent_axes: expected at least one latent, got none")
    sizes = {}
    for axis, size in dict(axis_sizes).items():
        if isinstance(size, bool) or int(size) != size or int(size) < 1:
            raise ModelError(f"axis_sizes: axis {axis!r} must have a positive integer size, got {size!r}")
        sizes[axis] = int(size)
    latent_axes = {
        name: _check_axes(axes, f"latent {name!r}") for name, axes in sorted(dict(latent_axes).items())
    }
    event_ndims = dict(event_ndims or {})
    local_axes = {}
    for name, axes in latent_axes.items():
        missing = [axis for axis in axes if axis not in sizes]
        if missing:
            raise ModelError(f"latent {name!r}: axes {missing} have no size in axis_sizes {sizes}")
        ndim = int(event_ndims.get(name, 0))
        if not 0 <= ndim <= len(axes):
            raise ModelError(f"latent {name!r}: event_ndims {ndim} does not fit its axes {axes}")
        local_axes[name] = axes[: len(axes) - ndim]
    unknown = sorted(set(event_ndims) - set(latent_axes))
    if unknown:
        raise ModelError(f"event_ndims: no latent named {unknown}; latents are {sorted(latent_axes)}")

    latent_names = tuple(latent_axes)  # sorted, the order of a flattened dict
    placeholders = {
        name: jax.ShapeDtypeStruct(tuple(sizes[axis] for axis in axes), jnp.float32)
        for name, axes in latent_axes.items()
    }
    dependencies = {}
    for item in factors:
        axes = _check_axes(item.axes, f"factor {item.name!r}")
        missing = [axis for axis in axes if axis not in sizes]
        if missing:
            raise ModelError(f"factor {item.name!r}: axes {missing} have no size in axis_sizes {sizes}")
        try:
            closed = jax.make_jaxpr(item.fn)(placeholders)
        except Exception as error:  # noqa: BLE001 - report any failure of user code clearly
            shapes = {name: value.shape for name, value in placeholders.items()}
            raise ModelError(
                f"factor {item.name!r} failed on latents of shapes {shapes}: {type(error).__name__}: {error}"
            ) from error
        expected = tuple(sizes[axis] for axis in axes)
        outputs = closed.out_avals
        if len(outputs) != 1 or tuple(outputs[0].shape) != expected:
            found = [tuple(aval.shape) for aval in outputs]
            raise ModelError(
                f"factor {item.name!r}: expected one array of shape {expected} (axes {axes}), "
                f"found output shape(s) {found}"
            )
        if not jnp.issubdtype(outputs[0].dtype, jnp.floating):
            raise ModelError(
                f"factor {item.name!r}: expected floating-point log-density terms, "
                f"found dtype {outputs[0].dtype}"
            )
        dependencies[item.name] = _used_inputs(closed, latent_names)
    factors = tuple(item._replace(axes=tuple(item.axes)) for item in factors)
    blankets = {
        name: tuple(item.name for item in factors if name in dependencies[item.name]) for name in latent_names
    }
    orphans = [name for name, blanket in blankets.items() if not blanket]
    if orphans:
        raise ModelError(
            f"latents {orphans} are read by no factor; every latent needs at least its prior "
            f"(factors read: { {k: list(v) for k, v in dependencies.items()} })"
        )
    # One reducer per (factor, local axes): latents with the same local axes share it.
    plan = {
        name: [index for index, item in enumerate(factors) if name in dependencies[item.name]]
        for name in latent_names
    }
    reducers = {
        (index, local_axes[name]): _reducer(factors[index].axes, local_axes[name], sizes)
        for name in latent_names
        for index in plan[name]
    }
    local_shapes = {name: tuple(sizes[axis] for axis in axes) for name, axes in local_axes.items()}

    def evaluate(latents):
        return [item.fn(latents) for item in factors]

    def total(values):
        return sum(jnp.sum(value) for value in values)

    def locals_from(values):
        cache = {}
        out = {}
        for name in latent_names:
            accumulated = None
            for index in plan[name]:
                key = (index, local_axes[name])
                if key not in cache:
                    cache[key] = reducers[key](values[index])
                accumulated = cache[key] if accumulated is None else accumulated + cache[key]
            out[name] = jnp.broadcast_to(accumulated, local_shapes[name])
        return out

    def logdensity_fn(latents):
        return total(evaluate(latents))

    def local_logdensity_fn(latents):
        return locals_from(evaluate(latents))

    def logdensity_and_local_fn(latents):
        values = evaluate(latents)
        return total(values), locals_from(values)

    def factor_values_fn(latents):
        return {item.name: value for item, value in zip(factors, evaluate(latents), strict=True)}

    return LogJoint(
        logdensity_fn=logdensity_fn,
        local_logdensity_fn=local_logdensity_fn,
        logdensity_and_local_fn=logdensity_and_local_fn,
        factor_values_fn=factor_values_fn,
        factors=factors,
        latent_axes=latent_axes,
        local_axes=local_axes,
        axis_sizes=sizes,
        dependencies=dependencies,
        blankets=blankets,
    )


class Model(NamedTuple):
    """A model bound to data: the log joint, its Markov blankets, and what evaluation needs.

    Attributes:
      name: e.g. ``"sparse_gamma_def"``.
      data: the observations, ``(N, D)`` float32.
      joint: the :class:`LogJoint` (factors, axes, blankets).
      logdensity_fn: ``latents -> log p(x, z)`` (scalar).
      local_logdensity_fn: ``latents -> {name: per-element local log joint}``.
      logdensity_and_local_fn: both from one evaluation of the factors.
      latents: ``() -> {name: Family}``, the default variational families (as in the paper).
      local_latent_names: latents with the observation axis ``"n"`` (one row per
        observation, refit for held-out data).
      global_latent_names: the others (weights), shared by all observations.
      observation_loglik: ``(latents, x) -> (N, D)`` per-entry ``log p(x_nd | latents)``,
        for held-out ``x`` (the local latents must have ``x``'s number of rows).
      mean_observation: ``latents -> (N, D)`` ``E[x_nd | latents]`` (Poisson rate, Bernoulli
        probability), for reconstructions.
      sample: ``(rng_key, num_observations=None) -> (data, latents)``, a draw of the
        generative process (data float32, shaped like ``data`` unless ``num_observations``).
      with_data: ``data -> Model``, the same model (hyperparameters) bound to other data.
      hyperparameters: the constructor's keyword arguments.
    """

    name: str
    data: jax.Array
    joint: LogJoint
    logdensity_fn: Callable[[dict], jax.Array]
    local_logdensity_fn: Callable[[dict], dict]
    logdensity_and_local_fn: Callable[[dict], tuple[jax.Array, dict]]
    latents: Callable[[], dict[str, Family]]
    local_latent_names: tuple[str, ...]
    global_latent_names: tuple[str, ...]
    observation_loglik: Callable[[dict, Any], jax.Array]
    mean_observation: Callable[[dict], jax.Array]
    sample: Callable[..., tuple[jax.Array, dict]]
    with_data: Callable[[Any], "Model"]
    hyperparameters: dict

    @property
    def latent_axes(self) -> dict[str, tuple[str, ...]]:
        return self.joint.latent_axes

    @property
    def latent_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: self.joint.latent_shape(name) for name in self.joint.latent_axes}

    def target(self, families: dict[str, Family] | None = None, use_local: bool = True) -> Target:
        """The :class:`~grepvi.Target` for the estimators (default families unless given)."""
        families = self.latents() if families is None else dict(families)
        return Target(self.logdensity_fn, families, self.local_logdensity_fn if use_local else None)


# --- small shared pieces of the paper's models ----------------------------------------------


def gamma_log_density(z, shape, rate, log_z=None):
    """``log Gamma(z; shape, rate)`` per element (shape/rate parameterization)."""
    log_z = jnp.log(z) if log_z is None else log_z
    return (
        shape * jnp.log(rate)
        - jax.scipy.special.gammaln(jnp.asarray(shape, jnp.result_type(z)))
        + (shape - 1.0) * log_z
        - rate * z
    )


def observation_matrix(data, likelihood: str, argument: str = "data") -> jax.Array:
    """Validates observations for ``likelihood`` ("poisson" or "bernoulli"); float32 ``(N, D)``.

    Raises :class:`~grepvi.DataError` naming ``argument``, what was expected and what was found.
    """
    try:
        values = np.asarray(data)
    except Exception as error:  # noqa: BLE001 - anything that is not an array
        raise DataError(f"{argument}: expected a 2-D array, found {type(data).__name__}") from error
    if values.dtype == object or not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise DataError(f"{argument}: expected a numeric 2-D array, found dtype {values.dtype}")
    if np.issubdtype(values.dtype, np.complexfloating):
        raise DataError(f"{argument}: expected real values, found dtype {values.dtype}")
    if values.ndim != 2:
        raise DataError(
            f"{argument}: expected a 2-D array (observations x dimensions), "
            f"found {values.ndim} dimension(s), shape {values.shape}"
        )
    if min(values.shape) == 0:
        raise DataError(f"{argument}: expected at least one row and one column, found shape {values.shape}")
    # Checked in blocks of rows in float64, so that no float64 copy or boolean mask of the
    # whole N x D matrix is made (the full Omniglot set is 1.4 GB in float32).
    nonfinite = _count_first(values, lambda block: ~np.isfinite(block))
    if nonfinite.count:
        raise DataError(
            f"{argument}: expected finite values; found {nonfinite.count} NaN or infinite "
            f"value(s), the first at index {nonfinite.first}"
        )
    if likelihood == "poisson":
        negative = _count_first(values, lambda block: block < 0)
        if negative.count:
            raise DataError(
                f"{argument}: Poisson counts must be non-negative integers; found "
                f"{negative.count} negative value(s) (min {float(values.min())!r}, "
                f"the first at index {negative.first})"
            )
        fractional = _count_first(values, lambda block: block != np.round(block))
        if fractional.count:
            index = fractional.first
            raise DataError(
                f"{argument}: Poisson counts must be non-negative integers; found "
                f"{fractional.count} non-integer value(s) (the first {float(values[index])!r} "
                f"at index {index})"
            )
        if values.max() > 2**24:
            raise DataError(
                f"{argument}: Poisson counts must be at most 2**24 = 16777216 to be exact in "
                f"float32; found max {float(values.max())!r}"
            )
    elif likelihood == "bernoulli":
        other = _count_first(values, lambda block: (block != 0) & (block != 1))
        if other.count:
            index = other.first
            raise DataError(
                f"{argument}: Bernoulli observations must be 0 or 1; found {other.count} "
                f"other value(s) (the first {float(values[index])!r} at index {index})"
            )
    else:  # pragma: no cover - programming error
        raise ValueError(f"unknown likelihood {likelihood!r}")
    return jnp.asarray(values, jnp.float32)


def _first(mask) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


class _Found(NamedTuple):
    count: int
    first: tuple[int, ...] | None


_BLOCK_ELEMENTS = 2**22  # rows per block: about 32 MB of float64


def _count_first(values, predicate) -> _Found:
    """How many entries of ``values`` satisfy ``predicate`` (evaluated in float64 on blocks of
    rows), and the index of the first."""
    rows = max(1, _BLOCK_ELEMENTS // max(1, values.shape[1]))
    count, first = 0, None
    for start in range(0, values.shape[0], rows):
        mask = predicate(np.asarray(values[start : start + rows], np.float64))
        found = int(np.count_nonzero(mask))
        if found and first is None:
            row, column = _first(mask)
            first = (start + row, column)
        count += found
    return _Found(count, first)


# --- checking local log joints against their definition -------------------------------------


class LocalCheck(NamedTuple):
    """Brute-force check of the local log joints: one row per changed element.

    ``full_difference`` is the change of the whole log joint when one element changes;
    ``local_difference`` the change of that element's local log joint. They are equal when
    the local log joint holds every term that depends on the element.
    """

    latent: tuple[str, ...]
    index: tuple[tuple[int, ...], ...]
    full_difference: np.ndarray
    local_difference: np.ndarray
    scale: np.ndarray  # magnitude of the terms involved (for a relative tolerance)

    def max_relative_error(self) -> float:
        error = np.abs(self.full_difference - self.local_difference)
        return float(np.max(error / np.maximum(self.scale, 1.0)))


def check_local_log_joints(
    logdensity_fn: Callable[[dict], jax.Array],
    local_logdensity_fn: Callable[[dict], dict],
    latents: dict,
    seed: int = 0,
    num_elements: int = 4,
    local_shapes: dict | None = None,
) -> LocalCheck:
    """Changes single latent elements and compares the two differences (see :class:`LocalCheck`).

    Each change multiplies the element by a log-normal factor (``sigma = 0.5``), which keeps
    it positive; for a latent with all values in ``(0, 1)`` a result ``>= 1`` is reflected
    back into ``(0, 1)``. All changed points are evaluated in one batch (``jax.vmap`` of the
    jitted functions: two compilations).

    Args:
      logdensity_fn, local_logdensity_fn: the model.
      latents: a point in the support (dict of arrays). Use float64 (``jax.enable_x64``) for a
        tight comparison: the whole log joint is a sum of many terms.
      seed: picks the elements and their new values.
      num_elements: elements changed per latent (distinct, at most the latent's size).
      local_shapes: the local (batch) shape of a latent whose family has event axes
        (Dirichlet rows): its whole event vector is changed and renormalised to sum to 1.
    """
    rng = np.random.default_rng(seed)
    base = {name: np.asarray(value) for name, value in latents.items()}
    local_shapes = dict(local_shapes or {})
    names, indices, points = [], [], []
    for name in sorted(base):
        value = base[name]
        batch_shape = tuple(local_shapes.get(name, value.shape))
        size = math.prod(batch_shape)
        for position in rng.choice(size, min(num_elements, size), replace=False):
            index = tuple(int(i) for i in np.unravel_index(int(position), batch_shape))
            old = value[index]
            new = old * np.exp(0.5 * rng.standard_normal(np.shape(old)))
            if len(batch_shape) < value.ndim:  # an event vector on the simplex
                new = new / np.sum(new)
            elif np.all(value < 1.0) and new >= 1.0:
                new = old * old / new
            changed = value.copy()
            changed[index] = new
            names.append(name)
            indices.append(index)
            points.append(changed)
    batch = {
        name: np.stack([points[i] if names[i] == name else base[name] for i in range(len(points))])
        for name in base
    }
    batch = jax.tree_util.tree_map(jnp.asarray, batch)
    point = jax.tree_util.tree_map(jnp.asarray, base)
    total = jax.jit(logdensity_fn)
    local = jax.jit(local_logdensity_fn)
    base_total = np.asarray(total(point), np.float64)
    base_local = {name: np.asarray(value, np.float64) for name, value in local(point).items()}
    new_total = np.asarray(jax.vmap(total)(batch), np.float64)
    new_local = jax.vmap(local)(batch)
    full, difference, scale = [], [], []
    for row, (name, index) in enumerate(zip(names, indices, strict=True)):
        after = float(np.asarray(new_local[name][row])[index])
        before = float(base_local[name][index])
        full.append(float(new_total[row] - base_total))
        difference.append(after - before)
        scale.append(abs(after) + abs(before))
    return LocalCheck(tuple(names), tuple(indices), np.array(full), np.array(difference), np.array(scale))

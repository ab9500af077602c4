"""Models as lists of factors over named axes; Markov blankets read off the axes.

The log joint of a model is a sum of *factors*. A factor is a function ``fn(latents, data)``
of the dict of latent arrays and the data (a dict of arrays) that returns one log-density
term per element of an array over *named axes*: the
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

Which latents a factor reads is found by tracing it once (``jax.make_jaxpr`` on abstract
shapes: nothing is computed) when the model is built, so there is nothing to declare and
nothing to get out of sync.

**Data is an argument.** The data arrays name their axes too (``x: ("n", "d")``, the
observation axis first) and every function built here takes ``(latents, data)``. A
compiled step then receives the data as an argument instead of embedding it as a constant
of the program: one compilation serves the training rows, the test rows, a minibatch of
rows or the rows of one device, and the 1.4 GB Omniglot matrix never enters a compilation
cache key. A factor that closes over a large array instead is refused when the model is
built (:class:`~grepvi.errors.ModelError`). The local log joints take their sizes from the
arrays they are given, so the same functions work for any number of observations. What the trace
cannot check is the axes rule above: a factor over ``("n",)`` that sums a latent over ``n``
breaks it, and its local log joints would miss terms (the gradient estimates would then be
biased). :func:`check_local_log_joints` tests a model against the brute-force definition
(change one element, recompute the whole log joint) and is cheap on a small instance.

The functions built from the factors evaluate every factor once per call:
``logdensity_fn`` (the scalar log joint), ``local_logdensity_fn`` (a dict of per-element
local log joints, each with its latent's batch shape) and ``logdensity_and_local_fn`` (both
from one evaluation of the factors: under ``jax.jit`` the shared work, e.g. the ``(N, D)``
Poisson rate matrix, is done once).

Example, a small Poisson factorization ``x_nd ~ Poisson(theta_n beta_d)`` with
``Gamma(1, 1)`` priors (the log joint up to constants)::

    >>> import jax.numpy as jnp
    >>> from grepvi.models import Factor, log_joint
    >>> counts = jnp.array([[1.0, 0.0, 3.0], [2.0, 5.0, 0.0]])  # (n, d)
    >>> def likelihood(z, data):
    ...     rate = z["theta"][:, None] * z["beta"][None, :]
    ...     return data["x"] * jnp.log(rate) - rate
    >>> joint = log_joint(
    ...     [
    ...         Factor("likelihood", ("n", "d"), likelihood),
    ...         Factor("theta_prior", ("n",), lambda z, data: -z["theta"]),
    ...         Factor("beta_prior", ("d",), lambda z, data: -z["beta"]),
    ...     ],
    ...     latent_axes={"theta": ("n",), "beta": ("d",)},
    ...     axis_sizes={"n": 2, "d": 3},
    ...     data_axes={"x": ("n", "d")},
    ... )
    >>> joint.blankets["theta"]
    ('likelihood', 'theta_prior')
    >>> local = joint.local_logdensity_fn({"theta": jnp.ones(2), "beta": jnp.ones(3)}, {"x": counts})
    >>> [round(float(v), 1) for v in local["theta"]]  # row sums of -1 per entry, minus 1
    [-4.0, -4.0]

Fit it with ``grepvi.fit(joint.logdensity_fn, {"theta": grepvi.Gamma((2,)), "beta":
grepvi.Gamma((3,))}, local_logdensity_fn=joint.local_logdensity_fn, data={"x": counts})``.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.errors import ModelError
from grepvi.target import Target

__all__ = [
    "Factor",
    "LogJoint",
    "log_joint",
    "gamma_log_density",
    "MAX_CONSTANT_BYTES",
]

MAX_CONSTANT_BYTES = 1 << 20  # a factor may close over at most this much: data is an argument


class Factor(NamedTuple):
    """A term of the log joint: ``fn(latents, data)`` is an array over the named ``axes``.

    Attributes:
      name: unique name (used in messages and in ``LogJoint.blankets``).
      axes: names of the output's axes, one per dimension (``()`` for a scalar term).
      fn: maps the dict of latent arrays and the dict of data arrays to the array of
        log-density terms; the factor's contribution to the log joint is the sum of its
        elements.
    """

    name: str
    axes: tuple[str, ...]
    fn: Callable[[dict, dict], jax.Array]


class LogJoint(NamedTuple):
    """The log joint built from factors, and the structure read off their axes.

    Every function takes ``(latents, data)``; the sizes of the axes come from the arrays
    given (``axis_sizes`` are the sizes the model was traced with).

    Attributes:
      logdensity_fn: ``(latents, data) -> scalar`` log joint (sum of all factors).
      local_logdensity_fn: ``(latents, data) -> {name: local log joint}`` with each latent's
        batch shape (its axes without the event axes).
      logdensity_and_local_fn: ``(latents, data) -> (scalar, dict)``, both from one
        evaluation.
      factor_values_fn: ``(latents, data) -> {factor name: array}``.
      factors: the factors, in order.
      latent_axes: each latent's axes (all of its array's dimensions).
      local_axes: each latent's batch axes (``latent_axes`` without the event axes).
      axis_sizes: the size of every axis (as traced).
      data_axes: each data array's axes.
      dependencies: for each factor, the latents it reads (from tracing it).
      blankets: for each latent, the factors that read it (its Markov blanket).
    """

    logdensity_fn: Callable[[dict, dict], jax.Array]
    local_logdensity_fn: Callable[[dict, dict], dict]
    logdensity_and_local_fn: Callable[[dict, dict], tuple[jax.Array, dict]]
    factor_values_fn: Callable[[dict, dict], dict]
    factors: tuple[Factor, ...]
    latent_axes: dict[str, tuple[str, ...]]
    local_axes: dict[str, tuple[str, ...]]
    axis_sizes: dict[str, int]
    dependencies: dict[str, tuple[str, ...]]
    blankets: dict[str, tuple[str, ...]]
    data_axes: dict[str, tuple[str, ...]] = {}

    def latent_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.axis_sizes[axis] for axis in self.latent_axes[name])

    def target(self, families: dict, use_local: bool = True) -> Target:
        """The log-space :class:`~grepvi.Target` of these factors (functions of ``(latents in the
        log space of their supports, data)``), with ``families``."""
        return Target(
            self.logdensity_fn,
            dict(families),
            self.local_logdensity_fn if use_local else None,
            takes_data=True,
            log_space=True,
        )


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
    """The names of the flattened inputs the output depends on.

    Dead code is eliminated first (``dce_jaxpr``): a factor that computes more than it returns
    (a NumPyro model's whole trace, of which a factor keeps one site) depends only on what its
    output reads. Without JAX's DCE (a private API), any input some equation reads counts."""
    try:
        from jax._src.interpreters.partial_eval import dce_jaxpr

        _, used = dce_jaxpr(closed_jaxpr.jaxpr, [True] * len(closed_jaxpr.jaxpr.outvars))
        return tuple(name for name, flag in zip(names, used, strict=True) if flag)
    except (ImportError, TypeError, ValueError):  # pragma: no cover - JAX internals changed
        pass
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


def _reducer(factor_axes, local_axes):
    """Maps a factor's values to a latent's local axes: sum, transpose, insert unit axes.

    The sizes come from the values (any number of observations)."""
    sum_axes = tuple(i for i, axis in enumerate(factor_axes) if axis not in local_axes)
    kept = [axis for axis in factor_axes if axis in local_axes]
    order = [kept.index(axis) for axis in local_axes if axis in kept]
    missing = tuple(i for i, axis in enumerate(local_axes) if axis not in kept)

    def reduce(value):
        if sum_axes:
            value = jnp.sum(value, axis=sum_axes)
        if order != sorted(order):
            value = jnp.transpose(value, order)
        return jnp.expand_dims(value, missing) if missing else value

    return reduce


def _nbytes(constant) -> int:
    """A jaxpr constant's bytes (a JAX array's own dtype: ``np.result_type`` of a JAX array is
    deprecated)."""
    dtype = constant.dtype if hasattr(constant, "dtype") else np.result_type(constant)
    return int(np.size(constant)) * np.dtype(dtype).itemsize


def log_joint(
    factors: Sequence[Factor],
    latent_axes: Mapping[str, Sequence[str]],
    axis_sizes: Mapping[str, int],
    event_ndims: Mapping[str, int] | None = None,
    data_axes: Mapping[str, Sequence[str]] | None = None,
    data_dtypes: Mapping[str, Any] | None = None,
    data_example: Any = None,
    evaluate_all: Callable | None = None,
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
      data_axes: each data array's name mapped to its axes (the observation axis ``"n"``
        first); the factors read ``data[name]``.
      data_dtypes: dtypes of data arrays that are not float32.
      data_example: instead of ``data_axes``, any pytree of arrays (or
        ``jax.ShapeDtypeStruct``) shaped like the data the functions will get: the factors
        are traced on its shapes (used for NumPyro models, whose data are their arguments).
      evaluate_all: optional ``(latents, data) -> {factor name: value}``, every factor's value
        at once, equal to calling each factor (a NumPyro model runs once for all its sites
        instead of once per site: a smaller program to trace and compile). The factors' own
        functions still give each factor's dependencies.

    Returns:
      A :class:`LogJoint`.

    Raises:
      ModelError: axes or sizes that do not fit, a factor whose output does not have the
        shape of its axes, a factor that fails on latents of the declared shapes, a factor
        that closes over an array of more than 1 MB (pass it as data), or a latent that no
        factor reads.
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

    data_axes = {
        name: _check_axes(axes, f"data {name!r}") for name, axes in sorted(dict(data_axes or {}).items())
    }
    for name, axes in data_axes.items():
        missing = [axis for axis in axes if axis not in sizes]
        if missing:
            raise ModelError(f"data {name!r}: axes {missing} have no size in axis_sizes {sizes}")
    data_dtypes = dict(data_dtypes or {})
    latent_names = tuple(latent_axes)  # sorted, the order of a flattened dict
    placeholders = {
        name: jax.ShapeDtypeStruct(tuple(sizes[axis] for axis in axes), jnp.float32)
        for name, axes in latent_axes.items()
    }
    data_placeholders = {
        name: jax.ShapeDtypeStruct(tuple(sizes[axis] for axis in axes), data_dtypes.get(name, jnp.float32))
        for name, axes in data_axes.items()
    }
    if data_example is not None:
        data_placeholders = jax.tree_util.tree_map(
            lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf), jnp.result_type(leaf)), data_example
        )
    dependencies = {}
    for item in factors:
        axes = _check_axes(item.axes, f"factor {item.name!r}")
        missing = [axis for axis in axes if axis not in sizes]
        if missing:
            raise ModelError(f"factor {item.name!r}: axes {missing} have no size in axis_sizes {sizes}")
        try:
            closed = jax.make_jaxpr(item.fn)(placeholders, data_placeholders)
        except Exception as error:  # noqa: BLE001 - report any failure of user code clearly
            shapes = {name: value.shape for name, value in placeholders.items()}
            data_shapes = jax.tree_util.tree_map(lambda leaf: leaf.shape, data_placeholders)
            raise ModelError(
                f"factor {item.name!r} failed on latents of shapes {shapes} and data of shapes "
                f"{data_shapes}: {type(error).__name__}: {error}"
            ) from error
        big = [np.shape(c) for c in closed.consts if _nbytes(c) > MAX_CONSTANT_BYTES]
        if big:
            raise ModelError(
                f"factor {item.name!r} closes over array(s) of shape(s) {big} (over 1 MB): they "
                "would be constants of every compiled program; pass them as data (data_axes) "
                "and read them from the factor's data argument"
            )
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
        names = latent_names + tuple(
            f"data:{i}" for i in range(len(jax.tree_util.tree_leaves(data_placeholders)))
        )
        dependencies[item.name] = tuple(n for n in _used_inputs(closed, names) if n in latent_names)
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
        (index, local_axes[name]): _reducer(factors[index].axes, local_axes[name])
        for name in latent_names
        for index in plan[name]
    }
    local_ndims = {name: len(axes) for name, axes in local_axes.items()}

    def evaluate(latents, data):
        data = {} if data is None else data
        if evaluate_all is not None:
            values = evaluate_all(latents, data)
            return [values[item.name] for item in factors]
        return [item.fn(latents, data) for item in factors]

    def total(values):
        return sum(jnp.sum(value) for value in values)

    def locals_from(values, latents):
        cache = {}
        out = {}
        for name in latent_names:
            accumulated = None
            for index in plan[name]:
                key = (index, local_axes[name])
                if key not in cache:
                    cache[key] = reducers[key](values[index])
                accumulated = cache[key] if accumulated is None else accumulated + cache[key]
            out[name] = jnp.broadcast_to(accumulated, jnp.shape(latents[name])[: local_ndims[name]])
        return out

    def logdensity_fn(latents, data=None):
        return total(evaluate(latents, data))

    def local_logdensity_fn(latents, data=None):
        return locals_from(evaluate(latents, data), latents)

    def logdensity_and_local_fn(latents, data=None):
        values = evaluate(latents, data)
        return total(values), locals_from(values, latents)

    def factor_values_fn(latents, data=None):
        return {item.name: value for item, value in zip(factors, evaluate(latents, data), strict=True)}

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
        data_axes=data_axes,
    )


# --- small shared pieces of the paper's models ----------------------------------------------


def gamma_log_density_log_space(log_z, shape, rate):
    """``log Gamma(z; shape, rate)`` per element as a function of ``log z`` (the density of
    ``z``, no Jacobian): ``shape log rate - log Gamma(shape) + (shape - 1) log z - rate e^log z``
    (``e^log z`` continued linearly above ``e^30``, :func:`grepvi.numerics.exp_linear_tail`)."""
    return (
        shape * jnp.log(rate)
        - jax.scipy.special.gammaln(jnp.asarray(shape, jnp.result_type(log_z)))
        + (shape - 1.0) * log_z
        - rate * numerics.exp_linear_tail(log_z)
    )


def gamma_log_density(z, shape, rate, log_z=None):
    """``log Gamma(z; shape, rate)`` per element (shape/rate parameterization)."""
    log_z = jnp.log(z) if log_z is None else log_z
    return (
        shape * jnp.log(rate)
        - jax.scipy.special.gammaln(jnp.asarray(shape, jnp.result_type(z)))
        + (shape - 1.0) * log_z
        - rate * z
    )

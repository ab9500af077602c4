"""Minibatch stochastic variational inference (Hoffman et al. 2013) for the named-axes models.

Each step draws ``B`` of the ``N`` observations (rows of the data, without replacement),
and estimates the gradient of the ELBO from them alone. With the observation axis ``n``::

    L = sum_global-factors E[log p] + H[q(globals)]
        + sum_n ( sum_{factors over n} E[log p]_n + H[q(z_n)] )

the batch estimate multiplies every per-observation term (factors with axis ``n``, and the
entropy of the batch's local latents) by ``N / B``. Its gradient with respect to the global
parameters is unbiased for the full-data gradient (averaged over batches it is exactly the
full gradient for the same standardized draws, ``tests/test_minibatch.py``). The batch's
local parameters are updated with their own exact gradient (the batch gradient divided by
``N / B``); the others are untouched. The optimizer runs separately on the globals and on
the gathered rows of the locals: per-element statistics (ADVI's ``s``) are gathered and
scattered with the rows, counters (ADVI's iteration count) are shared.

The model's data is an argument (:mod:`grepvi.models.model`): a step gathers the batch's
rows of every data array whose first axis is ``n`` (:func:`batch_data`) and evaluates the
model's factors on them, so nothing is traced twice and one compilation serves every batch.

Example::

    >>> import jax, numpy as np, grepvi
    >>> from grepvi.models import beta_gamma_mf
    >>> from grepvi.inference import minibatch
    >>> data = (np.random.default_rng(0).random((12, 5)) < 0.3).astype(np.float32)
    >>> problem = minibatch.minibatch_problem(beta_gamma_mf(data, 2), batch_size=4)
    >>> optimizer = grepvi.advi_stepsize(0.1)
    >>> state = minibatch.init(jax.random.key(0), problem, optimizer)
    >>> estimator = grepvi.get_estimator("grep")
    >>> step = jax.jit(lambda s, data: minibatch.step(s, problem, estimator, optimizer, data))
    >>> state, info = step(state, problem.data)
    >>> info.indices.shape
    (4,)
"""

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from grepvi.errors import ConfigError, ModelError
from grepvi.estimators.base import Estimator
from grepvi.inference.state import (
    all_finite,
    initial_params,
    keep_if,
    materialize_gradient,
    repeat_key,
    traced_once,
)
from grepvi.inference.widened_gradient import widened_target
from grepvi.models.model import OBSERVATION_AXIS
from grepvi.target import Target, bind_data

__all__ = [
    "MinibatchProblem",
    "MinibatchState",
    "MinibatchInfo",
    "minibatch_problem",
    "batch_target",
    "batch_data",
    "draw_rows",
    "batch_params",
    "init",
    "step",
    "gather_rows",
    "scatter_rows",
    "minibatch_fit_steps",
]


class MinibatchProblem(NamedTuple):
    """A model's log joint with its full-size variational families, for batches of rows.

    Attributes:
      factor_values_fn: ``(latents over the batch, batch data) -> {factor: values}``.
      families: the full-size family of every latent (locals have ``N`` rows).
      local_latent_names, global_latent_names: latents with and without the axis ``n``.
      factor_axes: each factor's named axes.
      dependencies: the latents each factor reads.
      local_axes: each latent's batch axes.
      data_axes: each data array's axes (rows are gathered from those whose first is ``n``).
      num_observations, batch_size: ``N`` and ``B``.
      data: the model's full data pytree (pass it to :func:`step`).
      log_space: the factors take the latents in log space (``Model.log_space``).
      axis: the name of the observation axis (``"n"``; a NumPyro model's subsampled plate).
      gather_fn: ``(data, indices) -> batch data``, where the rows are not gathered by
        ``data_axes`` (a NumPyro model indexes its data itself with its plate's indices).
    """

    factor_values_fn: Callable[[dict, dict], dict]
    families: dict
    local_latent_names: tuple[str, ...]
    global_latent_names: tuple[str, ...]
    factor_axes: dict[str, tuple[str, ...]]
    dependencies: dict[str, tuple[str, ...]]
    local_axes: dict[str, tuple[str, ...]]
    data_axes: dict[str, tuple[str, ...]]
    num_observations: int
    batch_size: int
    data: Any = None
    log_space: bool = False
    axis: str = OBSERVATION_AXIS
    gather_fn: Callable | None = None

    @property
    def scale(self) -> float:
        return self.num_observations / self.batch_size


class MinibatchState(NamedTuple):
    params: dict
    global_opt_state: Any
    local_opt_state: Any
    rng_key: jax.Array
    iteration: jax.Array
    num_skipped: jax.Array
    # what the estimator carries between steps (``Estimator.carried``), full size: a batch
    # gathers its locals' rows and scatters them back, as it does the local parameters
    estimator_state: Any = None


class MinibatchInfo(NamedTuple):
    elbo: jax.Array  # the batch's estimate of the full ELBO (per-observation terms scaled)
    finite: jax.Array
    indices: jax.Array  # the batch's rows


def minibatch_problem(model, batch_size: int, families: dict | None = None) -> MinibatchProblem:
    """The :class:`MinibatchProblem` of a :class:`~grepvi.models.Model` for batches of ``B`` rows.

    A model with its own ``minibatch_problem(batch_size, families)`` method (a NumPyro model
    with a subsampled plate, :class:`~grepvi.interop.numpyro_model.NumPyroModel`) builds it.

    Raises:
      ConfigError: ``batch_size`` not in ``1..N``.
      ModelError: a local latent or a data array whose observation axis is not its first.
    """
    if hasattr(model, "minibatch_problem"):
        return model.minibatch_problem(batch_size, families)
    num_observations = model.num_observations
    if (
        isinstance(batch_size, bool)
        or int(batch_size) != batch_size
        or not 1 <= batch_size <= num_observations
    ):
        raise ConfigError(f"batch_size must be an integer in 1..{num_observations}, got {batch_size!r}")
    batch_size = int(batch_size)
    families = dict(model.latents() if families is None else families)
    if getattr(model, "log_space", False):
        model.check_supports(families)
    joint = model.joint
    local_names = tuple(sorted(n for n in families if OBSERVATION_AXIS in joint.latent_axes[n]))
    global_names = tuple(sorted(n for n in families if n not in local_names))
    for name in local_names:
        if joint.latent_axes[name][0] != OBSERVATION_AXIS:
            raise ModelError(
                f"latent {name!r}: the observation axis must come first, got {joint.latent_axes[name]}"
            )
    for name, axes in joint.data_axes.items():
        if OBSERVATION_AXIS in axes and axes[0] != OBSERVATION_AXIS:
            raise ModelError(f"data {name!r}: the observation axis must come first, got {axes}")
    return MinibatchProblem(
        factor_values_fn=joint.factor_values_fn,
        families=families,
        local_latent_names=local_names,
        global_latent_names=global_names,
        factor_axes={factor.name: tuple(factor.axes) for factor in joint.factors},
        dependencies=dict(joint.dependencies),
        local_axes=dict(joint.local_axes),
        data_axes=dict(joint.data_axes),
        num_observations=num_observations,
        batch_size=batch_size,
        data=model.data,
        log_space=bool(getattr(model, "log_space", False)),
    )


def draw_rows(key, num_rows: int, batch_size: int) -> jax.Array:
    """``batch_size`` distinct rows of ``num_rows``, a uniformly random subset: the rows of the
    ``batch_size`` largest of ``num_rows`` random 24-bit keys (``lax.top_k``; a tie at the
    boundary, probability about ``num_rows / 2**24`` per draw, goes to the lower row).

    ``jax.random.choice(..., replace=False)`` permutes all rows: 44 ms per draw at 100,000
    rows on a CPU, against 2 ms here."""
    keys = (jax.random.bits(key, (num_rows,), jnp.uint32) >> 8).astype(jnp.float32)  # exact integers
    return jax.lax.top_k(keys, batch_size)[1]


def batch_data(problem: MinibatchProblem, data: dict, indices) -> dict:
    """Rows ``indices`` of every data array whose first axis is ``n``; the others as they are
    (``problem.gather_fn(data, indices)`` where the problem has one)."""
    if problem.gather_fn is not None:
        return problem.gather_fn(data, indices)
    return {
        name: value[indices] if problem.data_axes.get(name, ())[:1] == (problem.axis,) else value
        for name, value in data.items()
    }


class _ScaledEntropy:
    """A family whose entropy (and log-Jacobian, ADVI's entropy term) counts ``scale`` times."""

    def __init__(self, family, scale):
        self._family, self._scale = family, scale

    def __getattr__(self, name):
        return getattr(self._family, name)

    def entropy(self, params):
        return self._scale * self._family.entropy(params)

    def log_abs_det_jacobian(self, params, eps):
        return self._scale * self._family.log_abs_det_jacobian(params, eps)


def _batch_families(problem: MinibatchProblem, families: dict) -> dict:
    out = {}
    for name, family in families.items():
        if name in problem.local_latent_names:
            resized = dataclasses.replace(family, shape=(problem.batch_size,) + tuple(family.shape[1:]))
            out[name] = _ScaledEntropy(resized, problem.scale)
        else:
            out[name] = family
    return out


def _to_local(values, factor_axes, local_axes, shape):
    """A factor's values summed over the axes a latent lacks, laid out on its local axes."""
    sum_axes = tuple(i for i, axis in enumerate(factor_axes) if axis not in local_axes)
    kept = [axis for axis in factor_axes if axis in local_axes]
    reduced = jnp.sum(values, axis=sum_axes) if sum_axes else values
    reduced = jnp.transpose(reduced, [kept.index(axis) for axis in local_axes if axis in kept])
    missing = tuple(i for i, axis in enumerate(local_axes) if axis not in kept)
    return jnp.broadcast_to(jnp.expand_dims(reduced, missing) if missing else reduced, shape)


def batch_target(problem: MinibatchProblem, indices=None, families: dict | None = None) -> Target:
    """The :class:`~grepvi.Target` of a batch (per-observation terms scaled by N/B).

    Its functions take ``(latents over the batch, batch data)``: pass
    :func:`batch_data` of the rows (``indices`` is not needed and kept for compatibility)."""
    del indices
    families = problem.families if families is None else families
    scale = problem.scale

    def scaled_factors(latents, data):
        values = problem.factor_values_fn(latents, data)
        return {
            name: value * scale if problem.axis in problem.factor_axes[name] else value
            for name, value in values.items()
        }

    def logdensity_fn(latents, data):
        return sum(jnp.sum(value) for value in scaled_factors(latents, data).values())

    def local_logdensity_fn(latents, data):
        values = scaled_factors(latents, data)
        out = {}
        for name in families:
            axes = problem.local_axes[name]
            shape = jnp.shape(latents[name])[: len(axes)]
            terms = [
                _to_local(value, problem.factor_axes[factor], axes, shape)
                for factor, value in values.items()
                if name in problem.dependencies[factor]
            ]
            out[name] = sum(terms)
        return out

    return Target(
        logdensity_fn,
        _batch_families(problem, families),
        local_logdensity_fn,
        takes_data=True,
        log_space=problem.log_space,
    )


def batch_params(problem: MinibatchProblem, params: dict, indices) -> dict:
    """The variational parameters of the batch: rows ``indices`` of the locals, all globals."""
    return {
        name: jax.tree_util.tree_map(lambda leaf: leaf[indices], value)
        if name in problem.local_latent_names
        else value
        for name, value in params.items()
    }


def init(
    rng_key,
    problem: MinibatchProblem,
    optimizer,
    init_params: dict | None = None,
    estimator: Estimator | None = None,
) -> MinibatchState:
    """The state before the first step; with ``estimator``, the state it carries between steps
    where it has one (``Estimator.carried``: G-REP's running baseline), for every row."""
    init_key, run_key = jax.random.split(rng_key)
    params = initial_params(init_key, problem.families, init_params)
    carried = None if estimator is None else estimator.carried
    return MinibatchState(
        params=params,
        global_opt_state=optimizer.init({n: params[n] for n in problem.global_latent_names}),
        local_opt_state=optimizer.init({n: params[n] for n in problem.local_latent_names}),
        rng_key=run_key,
        iteration=jnp.zeros([], jnp.int32),
        num_skipped=jnp.zeros([], jnp.int32),
        estimator_state=None if carried is None else carried.init(problem.families, problem.log_space),
    )


def _is_local(path, local_names) -> bool:
    return any(isinstance(key, jax.tree_util.DictKey) and key.key in local_names for key in path)


def gather_rows(tree, local_names, indices):
    """Rows ``indices`` of every leaf of ``tree`` under a key in ``local_names`` (an
    estimator's carried state, keyed by latent as the parameters are); the others as they are."""
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: leaf[indices] if _is_local(path, local_names) and jnp.ndim(leaf) >= 1 else leaf,
        tree,
    )


def scatter_rows(tree, rows, local_names, indices):
    """``tree`` with rows ``indices`` of its local leaves set from ``rows`` (a tree of
    :func:`gather_rows`' shapes) and its other leaves replaced by ``rows``'."""

    def put(path, old, new):
        if _is_local(path, local_names) and jnp.ndim(old) >= 1:
            return old.at[indices].set(new)
        return new

    return jax.tree_util.tree_map_with_path(put, tree, rows)


def step(
    state: MinibatchState,
    problem: MinibatchProblem,
    estimator: Estimator,
    optimizer,
    data=None,
    indices=None,
    widened: bool = False,
    repeats=None,
) -> tuple[MinibatchState, MinibatchInfo]:
    """One minibatch iteration: draw rows, gather them, estimate, update globals and the batch's locals.

    ``data``: the full data pytree (``problem.data`` by default; pass it as an argument of the
    compiled step, or the step embeds it). ``indices`` (``B`` distinct rows) overrides the
    random batch. A non-finite gradient or
    update is skipped, as in :func:`grepvi.inference.state.step`. For an estimator with its own
    families (ADVI), build the problem with ``families=estimator.adapt_families(...)``.
    ``widened``: the batch's log density is differentiated in float64 where float32 overflows
    (:mod:`grepvi.inference.widened_gradient`).

    ``repeats``: an int array of the state (the default procedure's
    :func:`grepvi.inference.rules.repeats`): that many batches, each drawn independently (the
    first from the step's own key, the ``i``-th from ``fold_in(key, i)``), their locals updated
    batch by batch, and the globals once with the mean of their gradients, an effective batch
    of ``repeats x B`` rows (the default procedure raises it where batch noise keeps a stage
    from its tolerance). None: one batch.
    """
    rng_key, key_batch, key_estimate = jax.random.split(state.rng_key, 3)
    data = problem.data if data is None else data
    batch = widened_target(batch_target(problem)) if widened else batch_target(problem)
    carried = estimator.carried if state.estimator_state is not None else None
    one = _OneBatch(problem, batch, estimator, optimizer, data, state.iteration >= 0, carried)
    if repeats is None or indices is not None:
        if indices is None:
            indices = draw_rows(key_batch, problem.num_observations, problem.batch_size)
        out = one(state.params, state.local_opt_state, indices, key_estimate, state.estimator_state)
    else:
        out = _repeated_batches(one, state, key_batch, key_estimate, repeats)
    params, local_opt, global_grad, elbo, ok, indices, estimator_state = out

    global_params = {n: state.params[n] for n in problem.global_latent_names}
    updates, global_opt = optimizer.update(
        jax.tree_util.tree_map(jnp.negative, global_grad), state.global_opt_state, global_params
    )
    new_globals = optax.apply_updates(global_params, updates)
    ok = jnp.logical_and(ok, all_finite(new_globals))
    new_params = {**params, **new_globals}
    new_state = MinibatchState(
        params=keep_if(ok, new_params, state.params),
        global_opt_state=keep_if(ok, global_opt, state.global_opt_state),
        local_opt_state=keep_if(ok, local_opt, state.local_opt_state),
        rng_key=rng_key,
        iteration=state.iteration + 1,
        num_skipped=state.num_skipped + jnp.logical_not(ok).astype(jnp.int32),
        estimator_state=estimator_state,  # advanced by a skipped step's draws too, as in state.step
    )
    return new_state, MinibatchInfo(elbo, ok, indices)


class _OneBatch(NamedTuple):
    """One batch's estimate, and its locals' update: ``(params with the batch's locals
    updated, local optimizer state, the globals' gradient, ELBO estimate, finite, rows,
    carried estimator state)``."""

    problem: MinibatchProblem
    batch: Target
    estimator: Estimator
    optimizer: Any
    data: Any
    always: Any  # a runtime True (materialize_gradient's predicate)
    carried: Any = None  # the estimator's CarriedState, where the state holds one

    def __call__(self, params, local_opt_state, indices, key, estimator_state=None):
        problem = self.problem
        target = bind_data(self.batch, batch_data(problem, self.data, indices))
        batch = batch_params(problem, params, indices)
        if self.carried is None:
            grad, info = self.estimator.estimate(key, batch, target)
        else:  # the batch's rows of the carried state, advanced by its draws and put back
            local_names = problem.local_latent_names
            rows = gather_rows(estimator_state, local_names, indices)
            grad, info, statistics = self.carried.estimate(key, batch, target, rows)
            rows = self.carried.advance(rows, statistics)
            estimator_state = scatter_rows(estimator_state, rows, local_names, indices)
        grad = materialize_gradient(grad, self.always)
        global_grad = {n: grad[n] for n in problem.global_latent_names}
        local_grad = {
            n: jax.tree_util.tree_map(lambda g: g / problem.scale, grad[n])
            for n in problem.local_latent_names
        }
        gather = lambda leaf: leaf[indices] if jnp.ndim(leaf) >= 1 else leaf
        local_params = {n: batch[n] for n in problem.local_latent_names}
        batch_opt = jax.tree_util.tree_map(gather, local_opt_state)
        updates, new_batch_opt = self.optimizer.update(
            jax.tree_util.tree_map(jnp.negative, local_grad), batch_opt, local_params
        )
        new_batch_locals = optax.apply_updates(local_params, updates)
        scatter = lambda old, new: old.at[indices].set(new) if jnp.ndim(old) >= 1 else new
        local_opt = jax.tree_util.tree_map(scatter, local_opt_state, new_batch_opt)
        new_locals = {
            n: jax.tree_util.tree_map(scatter, params[n], new_batch_locals[n])
            for n in problem.local_latent_names
        }
        ok = jnp.logical_and(all_finite(grad), all_finite(new_batch_locals))
        return {**params, **new_locals}, local_opt, global_grad, info.elbo, ok, indices, estimator_state


def _repeated_batches(one: _OneBatch, state: MinibatchState, key_batch, key_estimate, repeats):
    """``repeats`` batches in a loop (a dynamic trip count; the batch traced once and its jaxpr
    replayed): each updates its rows' locals; the globals' gradients and the ELBO estimates
    are averaged; finite only if every batch was. The rows returned are the first batch's."""
    problem = one.problem

    def run(i, params, local_opt, key_batch, key_estimate, carried):
        rows = draw_rows(repeat_key(key_batch, i), problem.num_observations, problem.batch_size)
        return one(params, local_opt, rows, repeat_key(key_estimate, i), carried)

    carried = state.estimator_state
    start = (jnp.int32(0), state.params, state.local_opt_state, key_batch, key_estimate, carried)
    one_run, shapes = traced_once(run, *start)
    zeros = jax.tree_util.tree_map(lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), shapes[2:6])

    def body(i, carry):
        params, local_opt, total, elbo, ok, rows, carried = carry
        params, local_opt, grad, batch_elbo, batch_ok, batch_rows, carried = one_run(
            i, params, local_opt, key_batch, key_estimate, carried
        )
        total = jax.tree_util.tree_map(jnp.add, total, grad)
        rows = jnp.where(i == 0, batch_rows, rows)
        return params, local_opt, total, elbo + batch_elbo, jnp.logical_and(ok, batch_ok), rows, carried

    carry = (state.params, state.local_opt_state, zeros[0], zeros[1], jnp.asarray(True), zeros[3], carried)
    params, local_opt, total, elbo, ok, rows, carried = jax.lax.fori_loop(
        jnp.int32(0), jnp.asarray(repeats, jnp.int32), body, carry
    )
    count = jnp.asarray(repeats, jnp.int32)
    mean = jax.tree_util.tree_map(lambda g: g / count.astype(g.dtype), total)
    return params, local_opt, mean, elbo / count.astype(elbo.dtype), ok, rows, carried


def minibatch_fit_steps(builder, data, hyperparameters, batch_size, num_steps, seed=0, estimator="grep"):
    """Times ``num_steps`` jitted minibatch steps of ``builder(data, **hyperparameters)``.

    Returns the seconds of each timed step and of compilation plus the first step.
    """
    from grepvi.estimators.base import get_estimator
    from grepvi.optim.advi import advi_stepsize

    if num_steps < 1:
        raise ConfigError(f"num_steps must be positive, got {num_steps}")
    model = builder(data, **hyperparameters)
    estimator = get_estimator(estimator)
    problem = minibatch_problem(model, batch_size, estimator.adapt_families(model.latents()))
    optimizer = advi_stepsize(0.1)
    state = init(jax.random.key(seed), problem, optimizer)
    jitted = jax.jit(lambda s, data: step(s, problem, estimator, optimizer, data), donate_argnums=0)
    data = problem.data
    start = time.perf_counter()
    state, info = jitted(state, data)
    jax.block_until_ready(info.elbo)
    compile_seconds = time.perf_counter() - start
    seconds = []
    for _ in range(num_steps):
        start = time.perf_counter()
        state, info = jitted(state, data)
        jax.block_until_ready(info.elbo)
        seconds.append(time.perf_counter() - start)
    if not math.isfinite(float(info.elbo)):
        raise ModelError(f"minibatch ELBO is {float(info.elbo)} after {num_steps + 1} steps")
    return seconds, compile_seconds

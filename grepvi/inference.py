"""The inference loop: ``init`` / ``step`` as pure functions, and ``fit`` built from them.

``step`` draws a gradient estimate, guards it against non-finite values, and applies the
optimizer (by default the ADVI step-size sequence, paper Eq. 9). ``fit`` runs ``step`` under
``jax.lax.scan`` in chunks (one compilation for the whole run), shows progress, and returns
the fitted posterior with a trace of ELBO estimates and wall time.
"""

import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from grepvi.adaptive import AdaptiveSettings, Candidate, Convergence, run_adaptive
from grepvi.adaptive import set_step_size as _set_step_size
from grepvi.errors import ConfigError, ModelError, NonFiniteStepWarning, NotConvergedWarning, NumericalError
from grepvi.estimators.base import Estimator, Target, bind_data, get_estimator
from grepvi.families.base import Family, Posterior
from grepvi.natural_gradient import natural_gradient, positive_in_log_scale
from grepvi.optim import advi_stepsize

__all__ = [
    "VIState",
    "StepInfo",
    "Trace",
    "FitResult",
    "init",
    "step",
    "fit",
    "make_target",
    "ChunkReport",
    "chunk_program",
    "run_chunks",
    "materialize_gradient",
    "make_window",
    "draws_per_step",
    "average_estimates",
    "adaptive_candidates",
]


class VIState(NamedTuple):
    params: dict
    opt_state: Any
    rng_key: jax.Array
    iteration: jax.Array
    num_skipped: jax.Array  # steps whose gradient was non-finite and were skipped


class StepInfo(NamedTuple):
    elbo: jax.Array
    finite: jax.Array  # bool: the update was applied
    nonfinite_latents: jax.Array  # bool per latent (sorted names): its gradient was non-finite
    extras: dict


class Trace(NamedTuple):
    """Per-iteration record: ``elbo`` estimates and cumulative ``wall_time`` (seconds)."""

    elbo: np.ndarray
    wall_time: np.ndarray
    extras: dict


class FitResult(NamedTuple):
    """What :func:`fit` returns.

    Attributes:
      params: the fitted unconstrained parameters (the averaged iterate under the default
        procedure).
      families: each latent's family (ADVI's Gaussians for ``estimator="advi"``).
      posterior: each latent's fitted ``q`` (``mean()``, ``variance()``, ``sample(key, n)``).
      trace: per-iteration ELBO estimates and wall time.
      estimator: the estimator's name.
      state: the last optimizer state (resumable with :func:`step`).
      convergence: how the run ended (``converged``, ``reason``, ``num_iterations``, the
        estimated ``accuracy``); see :class:`grepvi.adaptive.Convergence`.
    """

    params: dict
    families: dict
    posterior: dict
    trace: Trace
    estimator: str
    state: VIState
    convergence: Convergence | None = None

    @property
    def num_skipped_steps(self) -> int:
        return int(self.state.num_skipped)

    @property
    def converged(self) -> bool:
        return bool(self.convergence is not None and self.convergence.converged)


def make_target(logdensity_fn, latents, local_logdensity_fn=None, takes_data: bool = False) -> Target:
    """Validates the latents dict and bundles it with the model into a :class:`Target`.

    ``takes_data``: the functions are ``(latents, data)`` (the data goes to each step as an
    argument)."""
    if not callable(logdensity_fn):
        raise ModelError(f"logdensity_fn must be callable, got {type(logdensity_fn).__name__}")
    if not isinstance(latents, dict) or not latents:
        raise ModelError(
            "latents must be a non-empty dict mapping each latent's name to a family, "
            f"e.g. {{'rate': grepvi.Gamma(shape=(3,))}}; got {latents!r}"
        )
    for name, family in latents.items():
        if not isinstance(family, Family):
            raise ModelError(
                f"latent {name!r}: expected a grepvi family (Gamma, Beta, ...), got {type(family).__name__}"
            )
    return Target(logdensity_fn, dict(latents), local_logdensity_fn, takes_data)


def _check_target(target: Target, params: dict, data=None) -> None:
    """Evaluates the model once at the families' means; raises a clear ModelError if not fit."""
    target = bind_data(target, data)
    point = {name: family.mean(params[name]) for name, family in target.families.items()}
    shapes = {name: family.shape for name, family in target.families.items()}
    try:
        value = target.logdensity_fn(point)
    except (TypeError, ValueError, IndexError, KeyError) as error:
        raise ModelError(
            f"logdensity_fn failed on latents of shapes {shapes}: {type(error).__name__}: {error}. "
            "Check that each family's shape fits what logdensity_fn expects."
        ) from error
    if jnp.shape(value) != ():
        raise ModelError(
            f"logdensity_fn must return a scalar, returned shape {jnp.shape(value)} "
            f"for latents of shapes {shapes}"
        )
    if target.local_logdensity_fn is not None:
        local = target.local_logdensity_fn(point)
        for name, family in target.families.items():
            if name not in local:
                raise ModelError(f"local_logdensity_fn returned no entry for latent {name!r}")
            if jnp.shape(local[name]) != family.batch_shape:
                raise ModelError(
                    f"latent {name!r}: local_logdensity_fn returned shape "
                    f"{jnp.shape(local[name])}, expected the family's batch shape "
                    f"{family.batch_shape}"
                )
    if not np.isfinite(float(value)):
        bad = []
        if target.local_logdensity_fn is not None:
            bad = [n for n in target.families if not np.all(np.isfinite(np.asarray(local[n])))]
        where = f" (non-finite local log joint for {bad})" if bad else ""
        raise ModelError(
            f"logdensity_fn is {float(value)} at the initial point (the families' means){where}; "
            "the model must be finite there. Check the support of each latent "
            f"({ {n: f.support for n, f in target.families.items()} }) and the data."
        )


def init(rng_key, target: Target, optimizer, init_params: dict | None = None) -> VIState:
    """Initial state: parameters from each family (or ``init_params``) and optimizer state."""
    init_key, run_key = jax.random.split(rng_key)
    if init_params is None:
        keys = jax.random.split(init_key, len(target.families))
        params = {
            name: family.init_params(key)
            for key, (name, family) in zip(keys, sorted(target.families.items()), strict=True)
        }
    else:
        params = jax.tree_util.tree_map(jnp.asarray, init_params)
        missing = sorted(set(target.families) - set(params))
        if missing:
            raise ModelError(f"init_params has no entry for latents {missing}")
    return VIState(
        params=params,
        opt_state=optimizer.init(params),
        rng_key=run_key,
        iteration=jnp.zeros([], jnp.int32),
        num_skipped=jnp.zeros([], jnp.int32),
    )


def materialize_gradient(grad, predicate):
    """``grad`` unchanged, computed once into memory before its consumers on CPU.

    The guard, Eq. 9's running average and the update all read the gradient. XLA's CPU
    backend fuses the gradient's last elementwise computations (the family's polygammas and
    chain rule) into each of these consumers and so computes them several times: a G-REP
    step of the Olivetti DEF took 31 ms instead of 19 ms in ``fit`` (``benchmarks/
    bench_def_peers.py``; an ``optimization_barrier`` is removed by the CPU pipeline and did
    not help). A conditional on a runtime ``predicate`` (always true) is a fusion boundary
    and makes XLA keep the gradient in memory (its other branch is ``leaf + 0``; with
    ``jnp.copy`` there the step took 25 ms). Other backends get ``grad`` as is: a
    conditional on a GPU costs a device-to-host transfer of the predicate.
    """
    if jax.default_backend() != "cpu":
        return grad
    return jax.lax.cond(
        predicate, lambda tree: tree, lambda tree: jax.tree_util.tree_map(lambda leaf: leaf + 0, tree), grad
    )


def step(
    state: VIState, target: Target, estimator: Estimator, optimizer, data=None
) -> tuple[VIState, StepInfo]:
    """One iteration of Algorithm 1: estimate, guard, update.

    ``data``: the data pytree of a target with ``takes_data`` (an argument of the compiled
    program, never a constant of it).

    A gradient with any non-finite component is not applied (the parameters and optimizer
    state stay as they were); ``StepInfo.nonfinite_latents`` says which latent had it, and
    ``VIState.num_skipped`` counts such steps.
    """
    target = bind_data(target, data)
    rng_key, key = jax.random.split(state.rng_key)
    grad, info = estimator.estimate(key, state.params, target)
    grad = materialize_gradient(grad, state.iteration >= 0)
    names = sorted(target.families)
    nonfinite = jnp.stack(
        [
            jnp.logical_not(
                jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grad[n])]))
            )
            for n in names
        ]
    )
    negative_grad = jax.tree_util.tree_map(jnp.negative, grad)
    updates, new_opt_state = optimizer.update(negative_grad, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    params_finite = jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(new_params)])
    )
    ok = jnp.logical_and(jnp.logical_not(jnp.any(nonfinite)), params_finite)
    keep = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)
    new_state = VIState(
        params=keep(new_params, state.params),
        opt_state=keep(new_opt_state, state.opt_state),
        rng_key=rng_key,
        iteration=state.iteration + 1,
        num_skipped=state.num_skipped + jnp.logical_not(ok).astype(jnp.int32),
    )
    return new_state, StepInfo(info.elbo, ok, nonfinite, dict(info.extras))


def _resolve_optimizer(optimizer, step_size):
    if optimizer is not None:
        return optimizer
    if (
        isinstance(step_size, bool)
        or not isinstance(step_size, int | float)
        or not np.isfinite(step_size)
        or step_size <= 0
    ):
        raise ConfigError(f"step_size must be a positive number, got {step_size!r}")
    return advi_stepsize(learning_rate=float(step_size))


STALL_STEPS = 50  # this many skipped steps in a row stop a run with NumericalError


def report_skipped_steps(finite, nonfinite_latents, names, first_iteration, consecutive=0, stall_steps=None):
    """Warns about skipped (non-finite) steps of one chunk; raises if the run has stalled.

    Returns the number of skipped steps in a row at the end of the chunk (carried to the
    next call). Which latent had the non-finite gradient and at which iterations is named.
    """
    finite = np.asarray(finite, bool)
    if finite.all():
        return 0
    bad = np.asarray(nonfinite_latents, bool)
    iterations = first_iteration + np.flatnonzero(~finite)
    latents = [name for i, name in enumerate(names) if bad[:, i].any()]
    warnings.warn(
        f"{(~finite).sum()} step(s) skipped at iteration(s) {iterations[:5].tolist()}"
        f"{'...' if iterations.size > 5 else ''}: non-finite gradient for latent(s) {latents} "
        "(the parameters were left as they were)",
        NonFiniteStepWarning,
        stacklevel=3,
    )
    run = 0
    for ok in finite:
        run = 0 if ok else run + 1
        consecutive = 0 if ok else consecutive + 1
        if consecutive >= (STALL_STEPS if stall_steps is None else stall_steps):
            raise NumericalError(
                f"{consecutive} steps in a row up to iteration {first_iteration + len(finite) - 1} "
                f"had a non-finite gradient (latents {latents}); the run has stalled. "
                "Lower the step size or check the model at the current parameters."
            )
    return consecutive


class ChunkReport(NamedTuple):
    """What :func:`run_chunks` hands its callback after each chunk.

    Attributes:
      state: the state after the chunk.
      first_iteration: iterations done before the chunk.
      done: iterations done after it.
      outputs: per-iteration arrays of the chunk (``elbo``, ``finite``,
        ``nonfinite_latents``, the estimator's scalar extras; ``params`` before each step
        with ``keep_params``).
      elapsed: seconds the chunk ran (compilation excluded).
      wall_time: seconds of running so far (``wall_time`` given plus every chunk's).
    """

    state: Any
    first_iteration: int
    done: int
    outputs: dict
    elapsed: float
    wall_time: float


def chunk_program(target: Target, estimator: Estimator, optimizer, length: int, keep_params: bool = False):
    """The jitted ``(state, data) -> (state, outputs)`` of ``length`` steps in a ``lax.scan``.

    The data is an argument (never a constant of the program). ``outputs`` are per iteration:
    ``elbo``, ``finite``, ``nonfinite_latents``, the scalar extras, and the parameters before
    each step with ``keep_params``.
    """

    def run(state, data):
        def body(carry, _):
            new_state, info = step(carry, target, estimator, optimizer, data)
            outputs = {"elbo": info.elbo, "finite": info.finite, "nonfinite_latents": info.nonfinite_latents}
            outputs.update({key: value for key, value in info.extras.items() if jnp.ndim(value) == 0})
            if keep_params:
                outputs["params"] = carry.params
            return new_state, outputs

        return jax.lax.scan(body, state, None, length=length)

    return jax.jit(run)


def run_chunks(
    state: VIState,
    target: Target,
    estimator: Estimator,
    optimizer,
    num_steps: int | None,
    chunk_size: int,
    callback: Callable | None = None,
    data=None,
    *,
    time_budget: float | None = None,
    wall_time: float = 0.0,
    should_stop: Callable[[], bool] | None = None,
    keep_params: bool = False,
    stall_steps: int | None = None,
):
    """The loop of a fixed schedule: jitted ``lax.scan`` chunks until a cap; one runner for all.

    ``grepvi.fit`` with a ``step_size`` or ``optimizer``, the command line's fixed schedule
    (:func:`grepvi.runs.train`: run folder, progress bar, checkpoints, SIGINT through
    ``callback`` and ``should_stop``) and the fixed-step refit of held-out rows all run here.
    (The default procedure runs in windows, :func:`make_window` and
    :func:`grepvi.adaptive.run_adaptive`.)

    Args:
      state: the state to start from (``state.iteration`` counts from there).
      num_steps: iterations to run (None: until ``time_budget`` or ``should_stop``).
      chunk_size: iterations per compiled chunk (the last may be shorter: one more program).
      callback: ``ChunkReport -> None`` after every chunk (outside the timed region).
      data: the data pytree of a target with ``takes_data``.
      time_budget: seconds of running (``wall_time`` included), checked between chunks.
      wall_time: seconds already run (a resumed run).
      should_stop: checked between chunks (SIGINT).
      keep_params: the outputs hold the parameters before each step.
      stall_steps: this many steps in a row with a non-finite gradient raise
        :class:`~grepvi.errors.NumericalError` (default ``STALL_STEPS``); the count runs
        across chunks.

    Returns:
      ``(state, trace, reason)``: the final state, the :class:`Trace` (ELBO and wall time
      per iteration, extras), and why it stopped (``"num_steps"``, ``"time_budget"``,
      ``"interrupted"``).
    """
    if num_steps is None and time_budget is None and should_stop is None:
        raise ConfigError("run_chunks: give num_steps, time_budget or should_stop")
    programs = {}

    def program(length):
        if length not in programs:
            jitted = chunk_program(target, estimator, optimizer, length, keep_params)
            programs[length] = jitted.lower(state, data).compile()
        return programs[length]

    elbos, times, extras = [], [], {}
    names = sorted(target.families)
    consecutive = 0
    done = 0
    reason = "num_steps"
    while True:
        if num_steps is not None and done >= num_steps:
            break
        if time_budget is not None and wall_time >= time_budget:
            reason = "time_budget"
            break
        if should_stop is not None and should_stop():
            reason = "interrupted"
            break
        length = chunk_size if num_steps is None else min(chunk_size, num_steps - done)
        run = program(length)  # compiled outside the timed region
        start = time.perf_counter()
        new_state, outputs = run(state, data)
        jax.block_until_ready(new_state)
        elapsed = time.perf_counter() - start
        outputs = jax.tree_util.tree_map(np.asarray, outputs)
        first = done
        state = new_state
        times.append(wall_time + elapsed * np.arange(1, length + 1) / length)
        wall_time += elapsed
        done += length
        elbos.append(outputs["elbo"])
        for key, value in outputs.items():
            if key not in ("elbo", "finite", "nonfinite_latents", "params"):
                extras.setdefault(key, []).append(value)
        if callback is not None:
            callback(ChunkReport(state, first, done, outputs, elapsed, wall_time))
        consecutive = report_skipped_steps(
            outputs["finite"], outputs["nonfinite_latents"], names, first, consecutive, stall_steps
        )
    trace = Trace(
        elbo=np.concatenate(elbos) if elbos else np.zeros(0),
        wall_time=np.concatenate(times) if times else np.zeros(0),
        extras={k: np.concatenate(v) for k, v in extras.items()},
    )
    return state, trace, reason


def make_window(target: Target, estimator: Estimator, optimizer, length: int, data=None):
    """A jitted ``(state, active) -> (state, mean of the iterates, outputs)`` over ``length`` steps.

    ``data`` is passed to the compiled window as an argument at every call (it is not a
    constant of the program); ``window.compiled(state, data, active)`` is the program.

    Only the first ``active`` steps (a traced integer, default all) are applied, so a run can
    end exactly at its cap without compiling a shorter window. ``outputs`` holds the
    per-iteration ``elbo``, ``finite``, ``nonfinite_latents`` and the scalar ``extras``, and
    ``active``; the iterate mean (over the applied steps) feeds the averaging of
    :mod:`grepvi.adaptive`.
    """

    def body(carry, index):
        state, total, active, data = carry
        new_state, info = step(state, target, estimator, optimizer, data)
        keep = index < active
        state = jax.tree_util.tree_map(lambda new, old: jnp.where(keep, new, old), new_state, state)
        total = jax.tree_util.tree_map(lambda t, p: t + jnp.where(keep, p, 0.0), total, state.params)
        extras = {key: value for key, value in info.extras.items() if jnp.ndim(value) == 0}
        return (state, total, active, data), {
            "elbo": info.elbo,
            "finite": info.finite,
            "nonfinite_latents": info.nonfinite_latents,
            "extras": extras,
        }

    @jax.jit
    def compiled(state, data, active):
        active = jnp.asarray(active, jnp.int32)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
        (state, total, _, _), outputs = jax.lax.scan(body, (state, zeros, active, data), jnp.arange(length))
        mean = jax.tree_util.tree_map(lambda t: t / jnp.maximum(active, 1).astype(t.dtype), total)
        return state, mean, {**outputs, "active": active}

    def window(state, active=length):
        return compiled(state, data, active)

    window.length = length
    window.compiled = compiled
    return window


def draws_per_step(families: dict, estimator: Estimator) -> int:
    """How many independent gradient estimates the default procedure averages per step.

    On small models a step costs little more than its dispatch, so averaging several estimates
    buys variance reduction almost for free: up to 64, while (latent elements x the
    estimator's own draws x this) stays within 256. Large models get 1.
    """
    elements = sum(int(np.prod(family.shape)) for family in families.values())
    own = int(estimator.options.get("num_samples", 1)) + int(estimator.options.get("num_control_samples", 0))
    return int(max(1, min(64, 256 // max(1, elements * own))))


def average_estimates(estimator: Estimator, count: int) -> Estimator:
    """``estimator`` averaged over ``count`` independent calls (itself when ``count == 1``)."""
    from grepvi.estimators.grep import multi_sample

    return estimator._replace(estimate=multi_sample(estimator.estimate, count, compute_variance=False))


ADAM_TRIAL_FACTORS = (1.0, 10.0, 0.1)  # Adam's learning rates in the trial, times adam_step_size


def adaptive_candidates(
    rng_key, target: Target, estimator: Estimator, settings: AdaptiveSettings, init_params=None, data=None
) -> list[Candidate]:
    """The update rules the default procedure tries, each from the same initial state.

    * ``natural``: natural-gradient steps with a KL trust region
      (:func:`grepvi.natural_gradient.natural_gradient`), when every family has a closed-form
      Fisher information. Newton-like near the optimum of models whose posterior is close to
      the family: it wins on the conjugate cases (the shape/variance direction is as fast as
      the mean's).
    * ``adam-<lr>``: Adam on the unconstrained parameters (Kingma & Ba 2015) at learning
      rates 0.1, 1 and 0.01 (one compilation: the rate is in the state,
      ``optax.inject_hyperparams``), a grid as in Stan's eta adaptation. Per-coordinate
      scaling by past gradient magnitudes: it wins on the deep exponential family, whose
      mean-field optimum is far from the posterior and whose ~10^5 coupled elements make
      parallel Newton-like steps overshoot (Olivetti: ELBO -7.3e6 after 120 s with Adam, no
      progress beyond -3e8 with natural steps; ``docs/optimization.md``).

    Each step averages :func:`draws_per_step` estimates.
    """
    stepper = average_estimates(estimator, draws_per_step(target.families, estimator))
    rules = []
    if all(family.has_fisher for family in target.families.values()):
        rules.append(
            (
                "natural",
                natural_gradient(target.families, settings.step_size, settings.max_kl),
                settings.step_size,
            )
        )
    adam = positive_in_log_scale(
        target.families, optax.inject_hyperparams(optax.adam)(learning_rate=settings.adam_step_size)
    )
    for factor in ADAM_TRIAL_FACTORS:
        rate = settings.adam_step_size * factor
        rules.append((f"adam-{rate:g}", adam, rate))
    candidates, windows = [], {}
    for label, optimizer, step_size in rules:
        state = init(rng_key, target, optimizer, init_params)
        if id(optimizer) not in windows:  # one compilation per update rule, whatever its step size
            windows[id(optimizer)] = make_window(target, stepper, optimizer, settings.window, data)
        state = _set_step_size(state, step_size)
        candidates.append(Candidate(label, state, windows[id(optimizer)], step_size))
    _check_target(target, candidates[0].state.params, data)
    return candidates


def fit(
    logdensity_fn: Callable[[dict], jax.Array],
    latents: dict[str, Family],
    estimator: str | Estimator = "grep",
    *,
    num_steps: int | None = None,
    time_budget: float | None = None,
    step_size: float | None = None,
    optimizer: optax.GradientTransformation | None = None,
    tolerance: float | None = None,
    seed: int = 0,
    num_samples: int | None = None,
    local_logdensity_fn: Callable[[dict], dict] | None = None,
    data=None,
    init_params: dict | None = None,
    estimator_options: dict | None = None,
    settings: AdaptiveSettings | None = None,
    chunk_size: int | None = None,
    progress: bool | None = None,
) -> FitResult:
    """Fits a mean-field variational approximation by stochastic gradient ascent on the ELBO.

    By default (no ``step_size``, no ``optimizer``) the procedure of :mod:`grepvi.adaptive`
    runs: natural-gradient steps with a KL trust region, averaged once stationary, the step
    halved in stages, until two stages agree within ``tolerance`` posterior standard
    deviations or a cap is reached; ``result.convergence`` says which. With ``step_size``
    the paper's schedule (Eq. 9 with that ``eta``) runs for ``num_steps`` exactly, as in the
    paper's experiments; with ``optimizer`` that optax optimizer does.

    Args:
      logdensity_fn: ``log p(x, z)`` as a function of a dict of latent arrays, or of
        ``(latents, data)`` when ``data`` is given (a model's ``logdensity_fn``).
      latents: each latent's name mapped to its family, e.g.
        ``{"rate": grepvi.Gamma(shape=(3,))}``.
      estimator: a registered name (``grepvi.estimator_names()``) or an ``Estimator``.
      num_steps: the cap on iterations (default procedure; default 200,000), or the number of
        iterations of a fixed schedule (default 1,000).
      time_budget: the cap on wall time in seconds (default procedure; compilation included).
      step_size: ``eta`` of the ADVI step-size sequence (paper Eq. 9): runs that schedule.
      optimizer: any optax transformation (fed the gradient of ``-ELBO``): runs it.
      tolerance: accuracy the default procedure stops at, in posterior standard deviations
        (default ``AdaptiveSettings.tolerance``).
      seed: random seed; the same seed gives the same result on the same machine.
      num_samples: Monte Carlo samples per gradient (estimator option).
      local_logdensity_fn: per-element local log joints (Markov blankets), see ``Target``.
      data: a pytree of arrays passed to ``logdensity_fn(latents, data)`` (and to
        ``local_logdensity_fn``); an argument of the compiled steps, never a constant of
        them (large data sets compile as fast as small ones). ``None``: the functions take
        the latents only.
      init_params: unconstrained starting parameters (else each family's ``init_params``).
      estimator_options: further options of the estimator.
      settings: all knobs of the default procedure (:class:`grepvi.adaptive.AdaptiveSettings`).
      chunk_size: iterations per compiled ``lax.scan`` chunk (window of the default procedure;
        default 100).
      progress: show a progress bar (default: when the run may be long).

    Returns:
      A :class:`FitResult` with ``posterior[name]`` (``mean()``, ``variance()``,
      ``sample(key, n)``), ``params``, ``trace`` (``elbo``, ``wall_time``) and
      ``convergence``.

    Example:
        >>> import jax.numpy as jnp, grepvi
        >>> counts = jnp.array([3.0, 5.0, 4.0])
        >>> def logdensity_fn(z):  # Gamma(2, 1) prior on a Poisson rate
        ...     rate = z["rate"]
        ...     prior = jnp.log(rate) - rate
        ...     return prior + jnp.sum(counts * jnp.log(rate) - rate)
        >>> result = grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma()}, progress=False)
        >>> result.converged, round(float(result.posterior["rate"].mean()), 2)  # exact: 14 / 4
        (True, 3.5)
    """
    fixed = step_size is not None or optimizer is not None
    if num_steps is not None and (
        isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 1
    ):
        raise ConfigError(f"num_steps must be a positive integer, got {num_steps!r}")
    if time_budget is not None and not (np.isfinite(time_budget) and time_budget > 0):
        raise ConfigError(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    options = dict(estimator_options or {})
    if num_samples is not None:
        options["num_samples"] = num_samples
    estimator = get_estimator(estimator, **options)
    target = make_target(logdensity_fn, latents, local_logdensity_fn, takes_data=data is not None)
    target = target._replace(families=estimator.adapt_families(target.families))
    if data is not None:
        data = jax.tree_util.tree_map(jnp.asarray, data)
    if fixed:
        return _fit_fixed(
            target, estimator, optimizer, step_size, num_steps, seed, init_params, chunk_size, progress, data
        )

    settings = (
        (settings or AdaptiveSettings())
        ._replace(
            **({"tolerance": tolerance} if tolerance is not None else {}),
            **({"window": int(chunk_size)} if chunk_size is not None else {}),
        )
        .validated()
    )
    max_steps = int(num_steps) if num_steps is not None else (None if time_budget else DEFAULT_MAX_STEPS)
    candidates = adaptive_candidates(jax.random.key(seed), target, estimator, settings, init_params, data)

    show = progress if progress is not None else True
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_steps, desc=f"fit[{estimator.name}]", unit="it", leave=False)
    elbos, times, extras = [], [], {}
    skipped = [0]  # steps with a non-finite gradient (never applied; the procedure backs off)
    names = sorted(target.families)
    bad_latents = np.zeros(len(names), bool)

    def callback(report):
        n = report.elbo.size
        previous = times[-1][-1] if times else 0.0
        times.append(previous + (report.wall_time - previous) * np.arange(1, n + 1) / n)
        elbos.append(report.elbo)
        for key, value in report.extras.items():
            extras.setdefault(key, []).append(value)
        skipped[0] += int(n - np.count_nonzero(report.finite))
        if report.nonfinite_latents.size:
            bad_latents[:] |= np.asarray(report.nonfinite_latents, bool).reshape(n, -1).any(0)
        if bar is not None:
            bar.set_description_str(f"fit[{estimator.name}]", refresh=False)
            bar.update(report.iterations_done - bar.n)
            finite = report.elbo[np.isfinite(report.elbo)]
            bar.set_postfix(
                elbo=f"{np.mean(finite):.5g}" if finite.size else "nan",
                rho=f"{report.step_size:.3g}",
                phase=report.phase,
                acc=f"{report.accuracy:.2g}",
            )

    try:
        state, params, convergence = run_adaptive(
            candidates,
            target.families,
            settings,
            max_steps=max_steps,
            time_budget=time_budget,
            callback=callback,
            on_trial_window=None if bar is None else _trial_display(bar, f"fit[{estimator.name}]"),
        )
    finally:
        if bar is not None:
            bar.close()
    trace = Trace(
        elbo=np.concatenate(elbos) if elbos else np.zeros(0),
        wall_time=np.concatenate(times) if times else np.zeros(0),
        extras={k: np.concatenate(v) for k, v in extras.items()},
    )
    if skipped[0]:
        latents = [name for name, bad in zip(names, bad_latents, strict=True) if bad]
        warnings.warn(
            f"{skipped[0]} of {convergence.num_iterations} step(s) skipped: non-finite gradient for "
            f"latent(s) {latents} (the parameters were left as they were; the step size was halved "
            f"{convergence.restarts} time(s) after falls)",
            NonFiniteStepWarning,
            stacklevel=2,
        )
    if not convergence.converged:
        skipped_note = (
            f"; {skipped[0]} step(s) had a non-finite gradient and were skipped" if skipped[0] else ""
        )
        warnings.warn(
            f"fit[{estimator.name}] stopped before converging: {convergence.summary()}{skipped_note}. "
            "Raise num_steps or time_budget, or loosen tolerance.",
            NotConvergedWarning,
            stacklevel=2,
        )
    return _result(target, estimator, state, params, trace, convergence)


DEFAULT_MAX_STEPS = 200_000


def _trial_display(bar, description):
    """Shows the trial of the update rules on a tqdm bar (its iterations are counted after)."""

    def show(label, done):
        bar.set_description_str(f"{description} trial: {label} steps", refresh=False)
        bar.set_postfix(iterations=done)

    return show


def _result(target, estimator, state, params, trace, convergence):
    posterior = {name: Posterior(family, params[name]) for name, family in target.families.items()}
    return FitResult(
        params=params,
        families=target.families,
        posterior=posterior,
        trace=trace,
        estimator=estimator.name,
        state=state,
        convergence=convergence,
    )


def _fit_fixed(
    target, estimator, optimizer, step_size, num_steps, seed, init_params, chunk_size, progress, data
):
    """A fixed schedule: ``optimizer`` (or Eq. 9 with ``eta = step_size``) for ``num_steps``."""
    num_steps = 1000 if num_steps is None else int(num_steps)
    optimizer = _resolve_optimizer(optimizer, step_size)
    state = init(jax.random.key(seed), target, optimizer, init_params)
    _check_target(target, state.params, data)

    chunk_size = int(chunk_size or min(100, num_steps))
    show = progress if progress is not None else num_steps >= 1000
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, desc=f"fit[{estimator.name}]", unit="it", leave=False)

    def callback(report):
        if bar is not None:
            bar.update(report.done - bar.n)
            bar.set_postfix(elbo=f"{np.mean(report.outputs['elbo']):.4g}")

    try:
        state, trace, _ = run_chunks(
            state, target, estimator, optimizer, num_steps, chunk_size, callback, data
        )
    finally:
        if bar is not None:
            bar.close()
    convergence = Convergence(converged=False, reason="fixed_schedule", num_iterations=num_steps)
    return _result(target, estimator, state, state.params, trace, convergence)

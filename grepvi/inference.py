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

from grepvi.errors import ConfigError, ModelError, NonFiniteStepWarning, NumericalError
from grepvi.estimators.base import Estimator, Target, get_estimator
from grepvi.families.base import Family, Posterior
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
    "materialize_gradient",
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
    params: dict
    families: dict
    posterior: dict
    trace: Trace
    estimator: str
    state: VIState

    @property
    def num_skipped_steps(self) -> int:
        return int(self.state.num_skipped)


def make_target(logdensity_fn, latents, local_logdensity_fn=None) -> Target:
    """Validates the latents dict and bundles it with the model into a :class:`Target`."""
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
    return Target(logdensity_fn, dict(latents), local_logdensity_fn)


def _check_target(target: Target, params: dict) -> None:
    """Evaluates the model once at the families' means; raises a clear ModelError if not fit."""
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


def step(state: VIState, target: Target, estimator: Estimator, optimizer) -> tuple[VIState, StepInfo]:
    """One iteration of Algorithm 1: estimate, guard, update.

    A gradient with any non-finite component is not applied (the parameters and optimizer
    state stay as they were); ``StepInfo.nonfinite_latents`` says which latent had it, and
    ``VIState.num_skipped`` counts such steps.
    """
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
    if not np.isfinite(step_size) or step_size <= 0:
        raise ConfigError(f"step_size must be a positive number, got {step_size!r}")
    return advi_stepsize(learning_rate=float(step_size))


STALL_STEPS = 50  # this many skipped steps in a row stop a run with NumericalError


def report_skipped_steps(finite, nonfinite_latents, names, first_iteration, consecutive=0):
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
        if consecutive >= STALL_STEPS:
            raise NumericalError(
                f"{consecutive} steps in a row up to iteration {first_iteration + len(finite) - 1} "
                f"had a non-finite gradient (latents {latents}); the run has stalled. "
                "Lower the step size or check the model at the current parameters."
            )
    return consecutive


def run_chunks(
    state: VIState,
    target: Target,
    estimator: Estimator,
    optimizer,
    num_steps: int,
    chunk_size: int,
    callback: Callable | None = None,
):
    """Runs ``num_steps`` steps as jitted ``lax.scan`` chunks; yields after every chunk.

    Returns the final state and per-iteration arrays (elbo, wall time, extras).
    """

    def scan_body(carry, _):
        return step(carry, target, estimator, optimizer)

    @jax.jit
    def run_chunk(carry):
        return jax.lax.scan(scan_body, carry, None, length=chunk_size)

    @jax.jit
    def run_one(carry):
        return jax.lax.scan(scan_body, carry, None, length=1)

    elbos, times, extras = [], [], {}
    names = sorted(target.families)
    consecutive = 0
    start = time.perf_counter()
    done = 0
    while done < num_steps:
        n = min(chunk_size, num_steps - done)
        if n == chunk_size:
            state, info = run_chunk(state)
        else:
            for _ in range(n):
                state, info1 = run_one(state)
                elbos.append(np.asarray(info1.elbo))
                now = time.perf_counter() - start
                times.append(np.array([now]))
                for key, value in info1.extras.items():
                    extras.setdefault(key, []).append(np.asarray(value))
                consecutive = report_skipped_steps(
                    info1.finite, info1.nonfinite_latents, names, done, consecutive
                )
                done += 1
            if callback is not None:
                callback(state, done, np.concatenate(elbos))
            continue
        info_elbo = np.asarray(info.elbo)  # blocks until the chunk is done
        now = time.perf_counter() - start
        previous = times[-1][-1] if times else 0.0
        times.append(previous + (now - previous) * np.arange(1, n + 1) / n)
        elbos.append(info_elbo)
        for key, value in info.extras.items():
            extras.setdefault(key, []).append(np.asarray(value))
        consecutive = report_skipped_steps(info.finite, info.nonfinite_latents, names, done, consecutive)
        done += n
        if callback is not None:
            callback(state, done, np.concatenate(elbos))
    trace = Trace(
        elbo=np.concatenate(elbos) if elbos else np.zeros(0),
        wall_time=np.concatenate(times) if times else np.zeros(0),
        extras={k: np.concatenate(v) for k, v in extras.items()},
    )
    return state, trace


def fit(
    logdensity_fn: Callable[[dict], jax.Array],
    latents: dict[str, Family],
    estimator: str | Estimator = "grep",
    *,
    num_steps: int = 1000,
    step_size: float = 0.1,
    optimizer: optax.GradientTransformation | None = None,
    seed: int = 0,
    num_samples: int | None = None,
    local_logdensity_fn: Callable[[dict], dict] | None = None,
    init_params: dict | None = None,
    estimator_options: dict | None = None,
    chunk_size: int | None = None,
    progress: bool | None = None,
) -> FitResult:
    """Fits a mean-field variational approximation by stochastic gradient ascent on the ELBO.

    Args:
      logdensity_fn: ``log p(x, z)`` as a function of a dict of latent arrays (data bound).
      latents: each latent's name mapped to its family, e.g.
        ``{"rate": grepvi.Gamma(shape=(3,))}``.
      estimator: a registered name (``grepvi.estimator_names()``) or an ``Estimator``.
      num_steps: iterations.
      step_size: ``eta`` of the ADVI step-size sequence (paper Eq. 9); ignored when an
        ``optimizer`` is given.
      optimizer: any optax transformation (it is fed the gradient of ``-ELBO``).
      seed: random seed; the same seed gives the same result on the same machine.
      num_samples: Monte Carlo samples per gradient (estimator option).
      local_logdensity_fn: per-element local log joints (Markov blankets), see ``Target``.
      init_params: unconstrained starting parameters (else each family's ``init_params``).
      estimator_options: further options of the estimator.
      chunk_size: iterations per compiled ``lax.scan`` chunk (default: up to 100).
      progress: show a progress bar (default: when ``num_steps >= 1000``).

    Returns:
      A :class:`FitResult` with ``posterior[name]`` (``mean()``, ``variance()``,
      ``sample(key, n)``), ``params`` and ``trace`` (``elbo``, ``wall_time``).

    Example:
        >>> import jax.numpy as jnp, grepvi
        >>> counts = jnp.array([3.0, 5.0, 4.0])
        >>> def logdensity_fn(z):  # Gamma(2, 1) prior on a Poisson rate
        ...     rate = z["rate"]
        ...     prior = jnp.log(rate) - rate
        ...     return prior + jnp.sum(counts * jnp.log(rate) - rate)
        >>> result = grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma()}, num_steps=2000,
        ...                     step_size=0.5, progress=False)
        >>> round(float(result.posterior["rate"].mean()), 1)  # exact: (2 + 12) / (1 + 3)
        3.5
    """
    if isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 1:
        raise ConfigError(f"num_steps must be a positive integer, got {num_steps!r}")
    options = dict(estimator_options or {})
    if num_samples is not None:
        options["num_samples"] = num_samples
    estimator = get_estimator(estimator, **options)
    target = make_target(logdensity_fn, latents, local_logdensity_fn)
    target = target._replace(families=estimator.adapt_families(target.families))
    optimizer = _resolve_optimizer(optimizer, step_size)
    state = init(jax.random.key(seed), target, optimizer, init_params)
    _check_target(target, state.params)

    chunk_size = int(chunk_size or min(100, int(num_steps)))
    show = progress if progress is not None else num_steps >= 1000
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(num_steps), desc=f"fit[{estimator.name}]", unit="it")

    def callback(current_state, done, elbos):
        if bar is not None:
            bar.update(done - bar.n)
            bar.set_postfix(elbo=f"{np.mean(elbos[-chunk_size:]):.4g}")

    try:
        state, trace = run_chunks(state, target, estimator, optimizer, int(num_steps), chunk_size, callback)
    finally:
        if bar is not None:
            bar.close()
    posterior = {name: Posterior(family, state.params[name]) for name, family in target.families.items()}
    return FitResult(
        params=state.params,
        families=target.families,
        posterior=posterior,
        trace=trace,
        estimator=estimator.name,
        state=state,
    )

"""``grepvi.fit``: a mean-field approximation fitted with the defaults, or with a fixed schedule.

By default (no ``step_size``, no ``optimizer``) the procedure of :mod:`grepvi.adaptive` runs
over the windows of :func:`grepvi.loop.make_window`; with a step size the paper's Eq. 9 runs
for a fixed number of steps (:func:`grepvi.loop.run_chunks`).
"""

import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from grepvi import validation
from grepvi.adaptive import AdaptiveSettings, Candidate, Convergence, run_adaptive
from grepvi.adaptive import set_step_size as _set_step_size
from grepvi.errors import ConfigError, NonFiniteStepWarning, NotConvergedWarning
from grepvi.estimators.base import Estimator, Target, get_estimator
from grepvi.families.base import Family, Posterior
from grepvi.inference import Trace, VIState, _check_target, init, make_target
from grepvi.loop import make_window, run_chunks
from grepvi.natural_gradient import natural_gradient, positive_in_log_scale
from grepvi.optim import advi_stepsize

__all__ = [
    "FitResult",
    "fit",
    "draws_per_step",
    "average_estimates",
    "adaptive_candidates",
    "DEFAULT_MAX_STEPS",
]


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
    logdensity_fn: Callable[[dict], jax.Array] | Target,
    latents: dict[str, Family] | None = None,
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
    log_space: bool = False,
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
        ``(latents, data)`` when ``data`` is given (a model's ``logdensity_fn``); or a
        :class:`~grepvi.Target` (``model.target()``: the model's log-space factors, its
        families and Markov blankets), then ``latents`` may be left out.
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
      log_space: ``logdensity_fn`` takes every latent in the log space of its support:
        ``log z`` for gamma, log-normal and Dirichlet latents, ``logit z`` for beta ones
        (``log z = jax.nn.log_sigmoid(u)``, ``log(1 - z) = jax.nn.log_sigmoid(-u)``). The
        estimators then hand it the exact draws the families make in that space, never
        ``z`` rounded to 0 or 1 in float32 (gamma shapes of 0.1 draw below ``1e-38`` once in
        6,000 draws). The density stays that of ``z``: no Jacobian term is added.
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
    seed = validation.seed(seed)  # the boundary's checks: errors in grepvi's words
    data = validation.data_pytree(data)
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
    if isinstance(logdensity_fn, Target):
        target = logdensity_fn
        if latents is not None:
            target = target._replace(families=dict(latents))
        if target.takes_data and data is None:
            raise ConfigError("data: this target takes (latents, data); pass data= (e.g. model.data)")
    else:
        target = make_target(
            logdensity_fn, latents, local_logdensity_fn, takes_data=data is not None, log_space=log_space
        )
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

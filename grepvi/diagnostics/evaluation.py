"""Evaluation as Ruiz, Titsias & Blei (2016, Section 5, "Evaluation") define it.

* **ELBO** per iteration: ``mean_s log p(x, z_s) + H[q]`` with ``z_s ~ q`` (the analytic
  entropy of every family), one draw for G-REP and BBVI, 20 for ADVI (:func:`elbo_estimate`).
* **Held-out log-likelihood per entry** of new observations ``x*`` (Olivetti, MNIST,
  Omniglot): the local latents ``z*`` of the test rows are fitted with the global latents'
  variational distribution ``q(W)`` held fixed (:func:`refit_local`: each step draws
  ``W ~ q(W)`` and takes a gradient step on the parameters of ``q(z*)`` only), then for each of
  ``S = 100`` posterior draws ``(z*_s, W_s)``::

      ll_s = 1 / (N D) sum_nd log p(x*_nd | z*_s, W_s)

  and the paper's "-4.48 +- 0.01" is ``mean_s ll_s +- std_s ll_s``
  (:func:`predictive_loglik`). The log-mean-exp version averages the predictive density
  first, ``1 / (N D) sum_nd log (1 / S sum_s p(x*_nd | z*_s, W_s))``.
* **Perplexity** of held-out words of the same documents (NIPS; no refit), with the Poisson
  rates of one posterior draw normalized per document into word probabilities::

      perplexity = exp( - sum_nd x*_nd log(rate_nd / sum_d' rate_nd') / sum_nd x*_nd )

  (:func:`perplexity_from_rates`, :func:`heldout_perplexity`).
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ConfigError
from grepvi.estimators.base import Estimator, total_entropy
from grepvi.families.base import Family
from grepvi.inference import controller, driver, fitting
from grepvi.inference.compilation_cache import once_compiler_options
from grepvi.inference.controller import AdaptiveSettings
from grepvi.inference.state import initial_params
from grepvi.inference.summary import tail_mean
from grepvi.target import Target, bind_data, inputs_at_means

__all__ = [
    "HeldoutLoglik",
    "sample_latents",
    "elbo_estimate",
    "predictive_loglik",
    "refit_local",
    "heldout_loglik",
    "perplexity_from_rates",
    "heldout_perplexity",
    "best_final_elbo",
]


class HeldoutLoglik(NamedTuple):
    """Average held-out log-likelihood per entry.

    Attributes:
      mean, std: mean and standard deviation over posterior draws of the per-draw average
        ``1/(ND) sum_nd log p(x_nd | z_s, W_s)`` (the paper's table).
      logmeanexp: ``1/(ND) sum_nd log mean_s p(x_nd | z_s, W_s)`` (posterior predictive).
      per_sample: the per-draw averages, shape ``(S,)``.
      refit_elbo: ELBO trace of the refit of the test rows' local latents (empty without).
    """

    mean: float
    std: float
    logmeanexp: float
    per_sample: np.ndarray
    refit_elbo: np.ndarray = np.zeros(0)

    def as_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std}


def sample_latents(rng_key, families: dict[str, Family], params: dict, log_space: bool = False) -> dict:
    """One draw ``z ~ q`` of every latent (keys split in sorted name order); in the log space
    of each support with ``log_space`` (for a target or function that takes it)."""
    keys = jax.random.split(rng_key, len(families))
    if log_space:
        return {
            name: families[name].sample_log_space(params[name], key)
            for key, name in zip(keys, sorted(families), strict=True)
        }
    return {
        name: families[name].sample(params[name], key)
        for key, name in zip(keys, sorted(families), strict=True)
    }


def elbo_estimate(rng_key, params: dict, target: Target, num_samples: int = 1, data=None) -> jax.Array:
    """``1/S sum_s log p(x, z_s) + sum_latents H[q]`` with ``z_s ~ q`` (no gradient)."""
    target = bind_data(target, data)
    params = jax.lax.stop_gradient(params)
    keys = jax.random.split(rng_key, num_samples)
    draws = jax.vmap(
        lambda key: target.logdensity_fn(sample_latents(key, target.families, params, target.log_space))
    )(keys)
    return jnp.mean(draws) + total_entropy(params, target.families)


def predictive_loglik(
    rng_key,
    observation_loglik: Callable[[dict], jax.Array],
    families: dict[str, Family],
    params: dict,
    num_samples: int = 100,
    data=None,
    log_space: bool = False,
) -> HeldoutLoglik:
    """Per-entry held-out log-likelihood over ``num_samples`` posterior draws.

    Args:
      rng_key: key of the posterior draws.
      observation_loglik: ``(latents, data) -> (N, D)`` array of ``log p(x_nd | latents)``
        for the held-out entries (``latents -> (N, D)`` when ``data`` is None).
      data: the held-out data pytree, an argument of the compiled evaluation.
      families, params: the variational distribution of every latent ``observation_loglik``
        reads.
      num_samples: posterior draws ``S`` (paper: 100).
      log_space: ``observation_loglik`` takes the latents in log space (a model's
        ``log_space_observation_loglik``).

    The draws run in a ``lax.scan`` with a running log-sum-exp, so memory stays at one
    ``(N, D)`` array whatever ``S``.
    """
    num_samples = _positive_int(num_samples, "eval samples")
    params = jax.lax.stop_gradient(params)
    loglik_fn = observation_loglik if data is not None else (lambda latents, _: observation_loglik(latents))
    run = jax.jit(
        functools.partial(
            _predictive_run,
            loglik_fn=loglik_fn,
            families=families,
            num_samples=num_samples,
            log_space=bool(log_space),
        )
    )
    per_sample, logmeanexp = run(rng_key, params, data)
    per_sample = np.asarray(per_sample, np.float64)
    return HeldoutLoglik(
        mean=float(np.mean(per_sample)),
        std=float(np.std(per_sample, ddof=1)) if num_samples > 1 else 0.0,
        logmeanexp=float(logmeanexp),
        per_sample=per_sample,
    )


def _predictive_run(rng_key, params, data, *, loglik_fn, families, num_samples, log_space):
    """The draws run in a ``lax.scan`` with a running log-sum-exp (parameters and data are
    arguments of the compiled program)."""

    def body(running, key):
        latents = sample_latents(key, families, params, log_space)
        loglik = loglik_fn(latents, data)
        return jnp.logaddexp(running, loglik), jnp.mean(loglik)

    shape = jax.eval_shape(
        lambda: loglik_fn(sample_latents(rng_key, families, params, log_space), data)
    ).shape
    start = jnp.full(shape, -jnp.inf, jnp.float32)
    running, per_sample = jax.lax.scan(body, start, jax.random.split(rng_key, num_samples))
    return per_sample, jnp.mean(running) - jnp.log(num_samples)


def _restrict(local_logdensity_fn, names):
    """The local log joints of ``names`` only (same arguments: latents, and data if any)."""
    if local_logdensity_fn is None:
        return None
    return lambda latents, *data: {
        name: value for name, value in local_logdensity_fn(latents, *data).items() if name in names
    }


def refit_local(
    rng_key,
    logdensity_fn: Callable,
    local_families: dict[str, Family],
    global_families: dict[str, Family],
    global_params: dict,
    estimator: Estimator,
    *,
    num_steps: int = 300,
    step_size: float | None = None,
    local_logdensity_fn: Callable | None = None,
    chunk_size: int = 50,
    optimizer=None,
    data=None,
    log_space: bool = False,
) -> tuple[dict, np.ndarray]:
    """Fits ``q(z*)`` of new observations with ``q(W)`` (the global latents) held fixed.

    Maximizes ``E_{q(W)}[ E_{q(z*)}[log p(x*, z*, W)] + H[q(z*)] ]`` over the parameters of
    ``q(z*)`` by stochastic gradient ascent: each step draws ``W ~ q(W)`` and hands
    ``estimator`` the log joint with that ``W`` bound, so only the local parameters get a
    gradient (cheaper than freezing the globals behind a zero update). By default the steps
    are those of ``grepvi.fit``'s procedure (:mod:`grepvi.inference.controller`: the better of natural
    and Adam steps in a trial, averaged once stationary) with ``num_steps`` as its cap; with
    ``step_size`` the ADVI sequence (paper Eq. 9) with ``eta = step_size``.

    The test data and the trained ``q(W)`` are arguments of the compiled steps (refitting
    other rows, or with other weights, reuses the program).

    Args:
      rng_key: key of the initialization, the estimator's draws and the ``W`` draws.
      logdensity_fn: ``log p(x*, z*, W)`` of the test data: ``(latents, data)`` with
        ``data``, else ``latents -> scalar``.
      local_families: families of the test rows' local latents (initialized fresh).
      global_families, global_params: the trained ``q(W)``.
      estimator: the gradient estimator (the one the model was trained with).
      num_steps: refit iterations (``0`` keeps the initialization).
      local_logdensity_fn: per-element local log joints of the test model (all latents).
      data: the test rows' data pytree (a model's ``prepare_data(x)``).
      log_space: the log joints take the latents in log space (:class:`~grepvi.Target`).

    Returns:
      ``(local_params, elbo_trace)``.
    """
    if isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 0:
        raise ConfigError(f"refit steps: expected a non-negative integer, found {num_steps!r}")
    num_steps = int(num_steps)
    names = tuple(sorted(local_families))
    target, refit_data = _refit_target(
        logdensity_fn, local_logdensity_fn, local_families, names, global_params, data
    )
    target = target._replace(log_space=bool(log_space))
    drawing = drawing_globals(estimator, global_families)
    if num_steps == 0:
        # one program, compiled for compile time (eagerly, each primitive of the families'
        # initializations compiles on its own: 16 programs, 1.5 s for the CLI's DEF)
        initialize = jax.jit(
            lambda key: initial_params(jax.random.split(key)[0], local_families),
            compiler_options=once_compiler_options(),
        )
        return initialize(rng_key), np.zeros(0)
    fixed = step_size is not None or optimizer is not None
    prepared = fitting.setup(
        _at_global_means(target, global_families),
        drawing,
        rng_key=rng_key,
        data=refit_data,
        step_size=step_size,
        optimizer=optimizer,
        settings=None if fixed else AdaptiveSettings(window=min(100, max(2, num_steps // 10))),
        chunk_size=chunk_size if fixed else None,
        max_steps=num_steps,
    )
    trace = driver.TraceObserver()
    final = prepared.run(max_steps=num_steps, observers=[trace])
    params = controller.answer(final.controller, final.loop, settings=prepared.plan.settings)
    return params, trace.arrays().get("elbo", np.zeros(0))


def _refit_target(logdensity_fn, local_logdensity_fn, local_families, names, global_params, data):
    """The refit's target over the local latents, and its data: the test rows' data and the
    parameters of ``q(W)`` (both arguments of the compiled steps)."""
    local_fn = _restrict(local_logdensity_fn, names)
    if data is None:
        full, local = (
            (lambda z, d: logdensity_fn(z)),
            (None if local_fn is None else lambda z, d: local_fn(z)),
        )
    else:
        full, local = logdensity_fn, local_fn
    target = Target(
        lambda latents, d: full(latents, d["data"]),
        local_families,
        None if local is None else (lambda latents, d: local(latents, d["data"])),
        takes_data=True,
    )
    refit_data = {"data": data, "global_params": jax.lax.stop_gradient(global_params)}
    return target, refit_data


def bind_globals(target: Target, weights: dict) -> Target:
    """The (data-bound) target over the local latents with the global latents at ``weights``."""
    logdensity_fn, local_fn = target.logdensity_fn, target.local_logdensity_fn
    return target._replace(
        logdensity_fn=lambda latents: logdensity_fn({**latents, **weights}),
        local_logdensity_fn=None if local_fn is None else (lambda latents: local_fn({**latents, **weights})),
    )


def drawing_globals(estimator: Estimator, global_families: dict) -> Estimator:
    """``estimator`` on the local latents, with fresh ``W ~ q(W)`` bound for every estimate.

    The parameters of ``q(W)`` come with the bound data (``target.bound_data["global_params"]``
    of the refit's target, :func:`refit_local`)."""

    def estimate(rng_key, params, target):
        key_w, key = jax.random.split(rng_key)
        weights = sample_latents(key_w, global_families, target.bound_data["global_params"], target.log_space)
        return estimator.estimate(key, params, bind_globals(target, weights))

    return estimator._replace(estimate=estimate)


def _at_global_means(target: Target, global_families: dict) -> Target:
    """The refit target whose own evaluation without ``W`` (the initial check of the model)
    puts ``W`` at the means of ``q(W)``; the estimates draw ``W ~ q(W)``
    (:func:`drawing_globals`) and pass it with the latents."""
    full, local = target.logdensity_fn, target.local_logdensity_fn

    def means(d):
        return inputs_at_means(d["global_params"], global_families, target.log_space)

    def check_fn(latents, d):
        if set(global_families) <= set(latents):
            return full(latents, d)
        return full({**latents, **means(d)}, d)

    def check_local(latents, d):
        if set(global_families) <= set(latents):
            return local(latents, d)
        return local({**latents, **means(d)}, d)

    return target._replace(logdensity_fn=check_fn, local_logdensity_fn=None if local is None else check_local)


def heldout_loglik(
    rng_key,
    model,
    families: dict[str, Family],
    params: dict,
    test_data,
    estimator: Estimator,
    *,
    num_samples: int = 100,
    refit_steps: int = 300,
    step_size: float | None = None,
) -> HeldoutLoglik:
    """Held-out log-likelihood per entry of new observations ``test_data`` (rows).

    Prepares the test rows for the same model (``model.prepare_data``: validation), refits
    their local latents with the trained global ``q(W)`` fixed (:func:`refit_local`), then
    evaluates :func:`predictive_loglik` over ``num_samples`` draws of the global and
    refitted local latents. The test data is an argument of every compiled program.

    Args:
      model: a :class:`grepvi.models.Model` (its hyperparameters and functions).
      families, params: the trained variational families and parameters (all latents).
      test_data: ``(N*, D)`` new observations, or a data pytree of the model.
      estimator: gradient estimator for the refit; its ``adapt_families`` picks the local
        families (ADVI: Gaussians on the unconstrained space).
    """
    data = test_data if isinstance(test_data, dict) else model.prepare_data(test_data)
    test_model = model.with_data(data["x"])
    local_names = tuple(model.local_latent_names)
    global_names = tuple(model.global_latent_names)
    local_families = {
        name: family
        for name, family in estimator.adapt_families(test_model.latents()).items()
        if name in local_names
    }
    global_families = {name: families[name] for name in global_names}
    global_params = {name: params[name] for name in global_names}
    refit_key, eval_key = jax.random.split(rng_key)
    log_space = bool(getattr(model, "log_space", False))  # a model object of one's own: values
    if log_space:
        model.check_supports({**global_families, **local_families})
    local_params, refit_elbo = refit_local(
        refit_key,
        model.joint.logdensity_fn if log_space else model.logdensity_fn,
        local_families,
        global_families,
        global_params,
        estimator,
        num_steps=refit_steps,
        step_size=step_size,
        local_logdensity_fn=model.joint.local_logdensity_fn if log_space else model.local_logdensity_fn,
        data=data,
        log_space=log_space,
    )
    result = predictive_loglik(
        eval_key,
        model.log_space_observation_loglik if log_space else model.observation_loglik,
        {**global_families, **local_families},
        {**global_params, **local_params},
        num_samples,
        data=data,
        log_space=log_space,
    )
    return result._replace(refit_elbo=refit_elbo)


def perplexity_from_rates(rates, heldout_counts) -> float:
    """``exp(-sum_nd x_nd log(r_nd / sum_d' r_nd') / sum_nd x_nd)`` for held-out counts ``x``.

    The Poisson rates of each document, normalized, are the word probabilities of a
    multinomial over its held-out words (paper Section 5); entries with ``x_nd = 0`` do not
    count. Works on NumPy or JAX arrays of shape ``(N, D)``.
    """
    rates = jnp.asarray(rates, jnp.float32)
    counts = jnp.asarray(heldout_counts, jnp.float32)
    tiny = jnp.finfo(jnp.float32).tiny
    log_probs = jnp.log(jnp.maximum(rates, tiny)) - jnp.log(
        jnp.maximum(jnp.sum(rates, 1, keepdims=True), tiny)
    )
    loglik = jnp.sum(jnp.where(counts > 0, counts * log_probs, 0.0))
    return jnp.exp(-loglik / jnp.sum(counts))


def heldout_perplexity(rng_key, model, families, params, heldout_counts, num_samples: int = 1) -> np.ndarray:
    """Perplexities of held-out words of the training documents, one per posterior draw.

    ``model.mean_observation`` of each draw gives the Poisson rates (no refit: the held-out
    words belong to the documents the model was trained on).
    """
    counts = jnp.asarray(heldout_counts, jnp.float32)

    @jax.jit
    def run(keys, params, counts):
        def one(key):
            return perplexity_from_rates(
                model.mean_observation(sample_latents(key, families, params)), counts
            )

        return jax.lax.map(one, keys)

    return np.asarray(run(jax.random.split(rng_key, num_samples), params, counts))


def best_final_elbo(elbo, fraction: float = 0.1) -> float:
    """Mean of the last ``fraction`` of an ELBO trace: the eta search's criterion.

    NaN entries (iterations where the ELBO was not evaluated) are dropped first; infinite values
    inside the tail are ignored; ``-inf`` for an empty or entirely non-finite trace
    (:func:`grepvi.inference.summary.tail_mean`, which a fit's ``repr`` reads too)."""
    return tail_mean(elbo, fraction)


def _positive_int(value, name):
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ConfigError(f"{name}: expected a positive integer, found {value!r}")
    return int(value)

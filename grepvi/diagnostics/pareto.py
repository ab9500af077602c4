"""Diagnostics of a fitted approximation: the Pareto-smoothed importance sampling k-hat.

Yao, Vehtari, Simpson & Gelman (2018, "Yes, but did it work?") and Vehtari, Simpson, Gelman,
Yao & Gabry (2024, "Pareto smoothed importance sampling", JMLR 25(72)): draw
``z_s ~ q``, form the log importance ratios ``r_s = log p(x, z_s) - log q(z_s)``, and fit a
generalized Pareto distribution (GPD) to the ``M = ceil(min(S / 5, 3 sqrt(S)))`` largest
ratios above the threshold ``u`` (the next largest), i.e. to ``exp(r) - exp(u)`` for those
draws. Its shape ``k`` is the number of finite moments' reciprocal: the importance weights
have finite variance for ``k < 1/2``, and Vehtari et al. (2024) read

* ``k < 0.7`` (more exactly ``min(1 - 1/log10(S), 0.7)``): the approximation is close enough
  for importance sampling to correct it; estimates from ``q`` are reliable;
* ``k >= 0.7``: ``q`` misses mass where ``p`` has it (too narrow, wrong tails).

The GPD shape is estimated as in the loo R package and ArviZ (``arviz.stats._gpdfit``): the
empirical-Bayes estimator of Zhang & Stephens (2009) with ``m = 30 + floor(sqrt(M))`` grid
points, followed by the weakly informative prior of Vehtari et al. (2024, Appendix C) that
shrinks ``k`` towards 0.5 with weight 10 draws. ArviZ is an optional extra of grepvi (it brings
xarray, pandas and netCDF libraries): :func:`pareto_k` uses ArviZ's ``psislw`` when ArviZ is
installed (``method="auto"``), and these 25 lines, reimplemented here, otherwise;
``tests/test_diagnostics.py`` checks them against GPD draws of known shape, against
``scipy.stats.genpareto.fit`` and (with the extra) against ArviZ.

References:
  J. Zhang and M. A. Stephens, "A new and efficient estimation method for the generalized
  Pareto distribution", Technometrics 51(3), 316-325, 2009.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ConfigError

__all__ = [
    "PARETO_K_THRESHOLD",
    "ParetoK",
    "pareto_k",
    "pareto_k_from_log_ratios",
    "log_importance_ratios",
    "psis_tail_length",
    "reliability_threshold",
    "fit_generalized_pareto",
]

PARETO_K_THRESHOLD = 0.7

_PRIOR_WEIGHT = 10.0  # draws' worth of the prior on k (Vehtari et al. 2024, Appendix C)
_PRIOR_K = 0.5


class ParetoK(NamedTuple):
    """``k`` (the GPD shape), ``sigma`` (its scale), the tail length ``M``, the number of
    draws, and whether ``k`` is below the reliability threshold for that many draws."""

    k: float
    sigma: float
    tail_length: int
    num_draws: int
    reliable: bool


def psis_tail_length(num_draws: int) -> int:
    """``M = ceil(min(S / 5, 3 sqrt(S)))``, the tail the GPD is fitted to."""
    return int(math.ceil(min(0.2 * num_draws, 3.0 * math.sqrt(num_draws))))


def reliability_threshold(num_draws: int) -> float:
    """``min(1 - 1 / log10(S), 0.7)`` (Vehtari et al. 2024, Section 3.2.4)."""
    return min(1.0 - 1.0 / math.log10(num_draws), PARETO_K_THRESHOLD)


def fit_generalized_pareto(exceedances):
    """``(k, sigma)`` of a GPD fitted to positive ``exceedances`` (Zhang & Stephens 2009,
    with the prior of Vehtari et al. 2024). Float64 numpy; the input need not be sorted."""
    x = np.sort(np.asarray(exceedances, np.float64))
    n = x.size
    if n < 5:
        raise ConfigError(f"fit_generalized_pareto needs at least 5 exceedances, got {n}")
    grid_size = 30 + int(math.sqrt(n))
    b = 1.0 - np.sqrt(grid_size / (np.arange(1, grid_size + 1, dtype=np.float64) - 0.5))
    b = b / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    k = np.mean(np.log1p(-b[:, None] * x), axis=1)
    log_likelihood = n * (np.log(-b / k) - k - 1.0)
    weights = 1.0 / np.sum(np.exp(log_likelihood[None, :] - log_likelihood[:, None]), axis=1)
    keep = weights >= 10.0 * np.finfo(np.float64).eps
    weights, b = weights[keep], b[keep]
    b_posterior = np.sum(b * weights / np.sum(weights))
    k_hat = np.mean(np.log1p(-b_posterior * x))
    sigma = -k_hat / b_posterior
    k_hat = (n * k_hat + _PRIOR_WEIGHT * _PRIOR_K) / (n + _PRIOR_WEIGHT)
    return float(k_hat), float(sigma)


def pareto_k_from_log_ratios(log_ratios) -> ParetoK:
    """PSIS ``k`` of importance weights given by their logs (any constant offset)."""
    r = np.asarray(log_ratios, np.float64).ravel()
    num_draws = r.size
    if num_draws < 100:
        raise ConfigError(f"pareto_k needs at least 100 draws, got {num_draws}")
    if np.any(np.isnan(r) | (r == np.inf)) or np.all(r == -np.inf):
        # NaN or infinite weights (or p zero at every draw): no finite estimate. Single weights
        # of zero (log ratio -inf, where p vanishes) are fine and kept.
        return ParetoK(math.inf, math.nan, 0, num_draws, False)
    r = r - np.max(r)
    tail_length = psis_tail_length(num_draws)
    order = np.sort(r)
    threshold = order[-tail_length - 1]
    tail = order[order > threshold]
    if tail.size < 5:
        # Ties: the weights take at most a few values above the threshold, so they are
        # bounded and have no tail (e.g. q equal to the posterior up to round-off).
        return ParetoK(-math.inf, 0.0, int(tail.size), num_draws, True)
    k, sigma = fit_generalized_pareto(np.exp(tail) - np.exp(threshold))
    return ParetoK(k, sigma, int(tail.size), num_draws, k < reliability_threshold(num_draws))


def log_importance_ratios(logdensity_fn, families, params, rng_key, num_draws: int, data=None):
    """``log p(x, z_s) - log q(z_s)`` for ``num_draws`` draws ``z_s ~ q``.

    ``data``: passed as ``logdensity_fn(z, data)`` (an argument of the compiled program)."""
    keys = jax.random.split(rng_key, len(families))
    latents = {
        name: family.sample(params[name], key, (num_draws,))
        for key, (name, family) in zip(keys, sorted(families.items()), strict=True)
    }
    log_joint = logdensity_fn if data is not None else (lambda z, _: logdensity_fn(z))

    def ratios(latents, params, data):
        def ratio(z):
            log_q = sum(jnp.sum(family.log_prob(params[name], z[name])) for name, family in families.items())
            return log_joint(z, data) - log_q

        return jax.vmap(ratio)(latents)

    return jax.jit(ratios)(latents, params, data)


def pareto_k(
    logdensity_fn, families, params, rng_key, num_draws: int = 4000, data=None, method: str = "auto"
) -> ParetoK:
    """PSIS Pareto ``k`` of the approximation ``q(z; params)`` to ``p(z | x)``.

    Args:
      logdensity_fn: ``log p(x, z)`` of a dict of latents (as given to :func:`grepvi.fit`).
      families: the fitted families (``FitResult.families``: ADVI's adapted ones for ADVI).
      params: the fitted parameters (``FitResult.params``).
      rng_key: a ``jax.random`` key.
      num_draws: draws from ``q`` (at least 100; Vehtari et al. use 4,000 or more).
      data: the data pytree of a ``logdensity_fn(latents, data)`` (a model's).
      method: ``"arviz"`` (ArviZ's ``psislw``), ``"grepvi"`` (the fit of this module) or
        ``"auto"``: ArviZ when it is installed.

    Returns:
      :class:`ParetoK`; ``k < 0.7`` reads as reliable.

    Example:
      >>> import jax, jax.numpy as jnp, grepvi
      >>> def logdensity_fn(z):  # a standard normal target
      ...     return -0.5 * jnp.sum(z["x"] ** 2)
      >>> narrow = grepvi.Normal(shape=(5,), init_scale=0.3)  # underdispersed q
      >>> families = {"x": narrow}
      >>> params = {"x": narrow.init_params()}
      >>> pareto_k(logdensity_fn, families, params, jax.random.key(0)).reliable
      False
    """
    if method not in ("auto", "arviz", "grepvi"):
        raise ConfigError(f"method: expected 'auto', 'arviz' or 'grepvi', found {method!r}")
    log_ratios = np.asarray(
        log_importance_ratios(logdensity_fn, families, params, rng_key, int(num_draws), data)
    )
    ours = pareto_k_from_log_ratios(log_ratios)
    if method == "grepvi" or not math.isfinite(ours.k):
        return ours
    try:
        from grepvi.interop.arviz_io import psis_pareto_k
    except ImportError:
        if method == "arviz":
            raise
        return ours
    try:
        k = psis_pareto_k(log_ratios)
    except ImportError:
        if method == "arviz":
            raise
        return ours
    return ParetoK(k, math.nan, ours.tail_length, ours.num_draws, k < reliability_threshold(ours.num_draws))

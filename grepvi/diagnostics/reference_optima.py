"""Non-conjugate models whose variational optimum is known independently of grepvi.

For each model the ELBO of its variational family has a closed form, through the moments of
``log z`` (gamma: ``E log z = psi(a) - log b``, ``Var log z = psi_1(a)``; beta: ``logit z`` has
mean ``psi(a) - psi(b)`` and variance ``psi_1(a) + psi_1(b)``; Dirichlet: ``Cov(log z_j, log
z_k) = psi_1(a_j) delta_jk - psi_1(a_0)``). :func:`optimum` maximizes it with scipy's L-BFGS in
float64 (log parameters, analytic gradients from ``scipy.special``), so the fitted ``q`` of
any estimator can be compared with the exact optimum: the test of "lands on the optimum"
where the posterior is *not* in the family.

Models (``z`` the latent, data fixed):

* ``gamma_lognormal``: ``z ~ Gamma(2, 1)``, ``y_i ~ Normal(log z, 0.5^2)``.
* ``beta_logitnormal``: ``z ~ Beta(1, 1)``, ``y_i ~ Normal(logit z, 0.7^2)``.
* ``dirichlet_logratio``: ``z ~ Dirichlet(1, 1, 1)``, counts ``c`` (multinomial) and
  ``y ~ Normal(log z_1 - log z_2, 0.4^2)``.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.special as sp

from grepvi.families import Beta, Dirichlet, Gamma

__all__ = ["ReferenceModel", "gamma_lognormal", "beta_logitnormal", "dirichlet_logratio", "REFERENCE_MODELS"]


class ReferenceModel(NamedTuple):
    """A model, its family, and the exact optimum's mean and variance per latent."""

    name: str
    logdensity_fn: Callable
    families: dict
    optimum_params: dict  # natural parameters of the optimal q
    optimum_mean: dict
    optimum_variance: dict


def _maximize(negative_elbo, start):
    result = scipy.optimize.minimize(negative_elbo, np.log(start), method="L-BFGS-B", options={"gtol": 1e-12})
    if not result.success and result.nit == 0:
        raise RuntimeError(f"reference optimum not found: {result.message}")
    return np.exp(result.x)


def gamma_lognormal(observations=(0.9, 1.3, 0.4, 1.1), prior=(2.0, 1.0), noise=0.5) -> ReferenceModel:
    y = np.asarray(observations, np.float64)
    a0, b0 = prior
    n, s1, s2 = y.size, y.sum(), (y**2).sum()

    def logdensity_fn(z):
        log_z = jnp.log(z["rate"])
        prior_term = (a0 - 1.0) * log_z - b0 * z["rate"]
        return prior_term - 0.5 * jnp.sum((y - log_z) ** 2) / noise**2

    def negative_elbo(log_params):
        a, b = np.exp(log_params)
        m, v = sp.digamma(a) - np.log(b), sp.polygamma(1, a)
        expected = (a0 - 1.0) * m - b0 * a / b - 0.5 * (s2 - 2 * s1 * m + n * (v + m**2)) / noise**2
        entropy = a - np.log(b) + sp.gammaln(a) + (1.0 - a) * sp.digamma(a)
        return -(expected + entropy)

    a, b = _maximize(negative_elbo, [5.0, 2.0])
    return ReferenceModel(
        "gamma-lognormal",
        logdensity_fn,
        {"rate": Gamma()},
        {"rate": {"concentration": a, "rate": b}},
        {"rate": a / b},
        {"rate": a / b**2},
    )


def beta_logitnormal(observations=(0.8, 1.5, 0.3, 1.2, 0.9), noise=0.7) -> ReferenceModel:
    y = np.asarray(observations, np.float64)
    n, s1, s2 = y.size, y.sum(), (y**2).sum()

    def logdensity_fn(z):
        p = z["prob"]
        logit = jnp.log(p) - jnp.log1p(-p)
        return -0.5 * jnp.sum((y - logit) ** 2) / noise**2

    def negative_elbo(log_params):
        a, b = np.exp(log_params)
        m = sp.digamma(a) - sp.digamma(b)
        v = sp.polygamma(1, a) + sp.polygamma(1, b)
        expected = -0.5 * (s2 - 2 * s1 * m + n * (v + m**2)) / noise**2
        entropy = (
            sp.betaln(a, b)
            - (a - 1) * sp.digamma(a)
            - (b - 1) * sp.digamma(b)
            + (a + b - 2) * sp.digamma(a + b)
        )
        return -(expected + entropy)

    a, b = _maximize(negative_elbo, [3.0, 1.0])
    total = a + b
    return ReferenceModel(
        "beta-logitnormal",
        logdensity_fn,
        {"prob": Beta()},
        {"prob": {"concentration1": a, "concentration0": b}},
        {"prob": a / total},
        {"prob": a * b / (total**2 * (total + 1.0))},
    )


def dirichlet_logratio(counts=(4.0, 1.0, 2.0), ratio=1.5, noise=0.4) -> ReferenceModel:
    c = np.asarray(counts, np.float64)
    k = c.size

    def logdensity_fn(z):
        log_z = jnp.log(z["probs"])
        return jnp.sum(c * log_z) - 0.5 * (ratio - (log_z[0] - log_z[1])) ** 2 / noise**2

    def negative_elbo(log_params):
        alpha = np.exp(log_params)
        total = alpha.sum()
        mean_log = sp.digamma(alpha) - sp.digamma(total)
        d = mean_log[0] - mean_log[1]
        var_d = sp.polygamma(1, alpha[0]) + sp.polygamma(1, alpha[1])  # the -psi_1(a_0) terms cancel
        expected = np.sum(c * mean_log) - 0.5 * ((ratio - d) ** 2 + var_d) / noise**2
        log_b = np.sum(sp.gammaln(alpha)) - sp.gammaln(total)
        entropy = log_b + (total - k) * sp.digamma(total) - np.sum((alpha - 1) * sp.digamma(alpha))
        return -(expected + entropy)

    alpha = _maximize(negative_elbo, np.full(k, 2.0))
    total = alpha.sum()
    return ReferenceModel(
        "dirichlet-logratio",
        logdensity_fn,
        {"probs": Dirichlet(shape=(k,))},
        {"probs": {"concentration": alpha}},
        {"probs": alpha / total},
        {"probs": alpha * (total - alpha) / (total**2 * (total + 1.0))},
    )


REFERENCE_MODELS = {
    "gamma-lognormal": gamma_lognormal,
    "beta-logitnormal": beta_logitnormal,
    "dirichlet-logratio": dirichlet_logratio,
}

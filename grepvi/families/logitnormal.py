"""Logit-normal family: ADVI's Gaussian on the logit scale, seen on the unit interval.

``logit z ~ Normal(mu, sigma^2)``, i.e. ``z = sigmoid(mu + sigma eps)`` with ``eps ~ N(0, 1)``
(Kucukelbir et al. 2017, Section 2.3: ADVI's transform for a latent on ``(0, 1)``)::

    log q(z) = log N(logit z; mu, sigma^2) - log z - log(1 - z)
    log J    = log |dz / d eps| = log z + log(1 - z) + log sigma

The standardization ``eps = (logit z - mu) / sigma`` is standard normal for every
``(mu, sigma)``, so ``g_corr = 0`` and G-REP is the plain reparameterization gradient.

The mean, the variance and the entropy have no closed form. They are computed by
64-point Gauss-Hermite quadrature over ``eps`` (:func:`gauss_hermite_expectation`), which is
accurate to float32 round-off for ``sigma`` up to about 10 (the integrands are smooth
and bounded by ``|mu| + sigma |eps|``); the entropy is
``H[N(mu, sigma^2)] + E[log z + log(1 - z)]``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.families.location_scale import HALF_LOG_2PI as _HALF_LOG_2PI
from grepvi.families.location_scale import LocationScale

__all__ = ["LogitNormal", "gauss_hermite_expectation"]

_NUM_NODES = 64
_NODES, _WEIGHTS = np.polynomial.hermite.hermgauss(_NUM_NODES)


def gauss_hermite_expectation(function, loc, scale):
    """``E[function(loc + scale eps)]`` for ``eps ~ N(0, 1)``, elementwise, by 64-point
    Gauss-Hermite quadrature: ``sum_j w_j function(loc + sqrt(2) scale x_j) / sqrt(pi)``."""
    loc, scale = jnp.asarray(loc), jnp.asarray(scale)
    dtype = jnp.result_type(loc, scale)
    nodes = jnp.asarray(np.sqrt(2.0) * _NODES, dtype)
    weights = jnp.asarray(_WEIGHTS / np.sqrt(np.pi), dtype)
    points = loc[..., None] + scale[..., None] * nodes
    return jnp.sum(weights * function(points), -1)


def _log_sigmoid(x):
    return -jax.nn.softplus(-x)


@dataclasses.dataclass(frozen=True)
class LogitNormal(LocationScale):
    """Mean-field logit-normal family; parameters ``{"loc", "scale"}`` (scale unconstrained)."""

    support = "unit_interval"

    def log_prob(self, params, z):
        return self._log_prob(params, jnp.log(z), jnp.log1p(-z))

    def log_prob_log_space(self, params, logit):
        return self._log_prob(params, _log_sigmoid(logit), _log_sigmoid(-logit))

    def _log_prob(self, params, log_z, log_one_minus_z):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        logit = log_z - log_one_minus_z
        return -0.5 * ((logit - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI - log_z - log_one_minus_z

    def entropy(self, params):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        log_jacobian = gauss_hermite_expectation(lambda x: _log_sigmoid(x) + _log_sigmoid(-x), loc, scale)
        return 0.5 + jnp.log(scale) + _HALF_LOG_2PI + log_jacobian

    def mean(self, params):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        return gauss_hermite_expectation(jax.nn.sigmoid, loc, scale)

    def log_space_mean(self, params):
        """``logit E[z]``; where the mean rounds to 0 or 1, the location ``mu`` (same sign)."""
        logit = self.to_log_space(self.mean(params))
        return jnp.where(jnp.isfinite(logit), logit, params["loc"])

    def variance(self, params):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        mean = gauss_hermite_expectation(jax.nn.sigmoid, loc, scale)
        # E[(z - m)^2] directly (no cancellation of E[z^2] - m^2 for small variances).
        return gauss_hermite_expectation(lambda x: (jax.nn.sigmoid(x) - mean[..., None]) ** 2, loc, scale)

    def standardize(self, params, z):
        logit = jnp.log(z) - jnp.log1p(-z)
        return (logit - params["loc"]) / numerics.softplus(params["scale"])

    def logit_transform(self, params, eps):
        """``logit T(eps; v) = mu + sigma eps``, exact."""
        return params["loc"] + numerics.softplus(params["scale"]) * eps

    def transform(self, params, eps):
        return numerics.safe_sigmoid(self.logit_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        logit = self.logit_transform(params, eps)
        return _log_sigmoid(logit) + _log_sigmoid(-logit) + jnp.log(numerics.softplus(params["scale"]))

"""Log-normal variational family.

``log z ~ Normal(mu, sigma^2)``. Standardization (Ruiz, Titsias & Blei 2016, Section 3.1):
``eps = (log z - mu) / sigma`` is standard normal whatever ``(mu, sigma)``, so ``g_corr = 0``
and G-REP reduces to ADVI with a log transform. ``sigma`` is optimized through softplus.
"""

import dataclasses

import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.location_scale import HALF_LOG_2PI as _HALF_LOG_2PI
from grepvi.families.location_scale import LocationScale

__all__ = ["LogNormal"]


@dataclasses.dataclass(frozen=True)
class LogNormal(LocationScale):
    """Mean-field log-normal family; parameters ``{"loc", "scale"}`` (scale unconstrained)."""

    support = "positive"

    def log_prob(self, params, z):
        return self.log_prob_log_space(params, jnp.log(z))

    def log_prob_log_space(self, params, log_z):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        return -0.5 * ((log_z - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI - log_z

    def entropy(self, params):
        scale = numerics.softplus(params["scale"])
        return params["loc"] + 0.5 + jnp.log(scale) + _HALF_LOG_2PI

    def mean(self, params):
        scale = numerics.softplus(params["scale"])
        return jnp.exp(params["loc"] + 0.5 * scale**2)

    def log_space_mean(self, params):
        """``log E[z] = mu + s^2 / 2``, finite where the mean overflows."""
        return params["loc"] + 0.5 * numerics.softplus(params["scale"]) ** 2

    def variance(self, params):
        scale = numerics.softplus(params["scale"])
        return jnp.expm1(scale**2) * jnp.exp(2.0 * params["loc"] + scale**2)

    def standardize(self, params, z):
        return (jnp.log(z) - params["loc"]) / numerics.softplus(params["scale"])

    def log_transform(self, params, eps):
        return params["loc"] + numerics.softplus(params["scale"]) * eps

    def transform(self, params, eps):
        return numerics.safe_exp(self.log_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        return self.log_transform(params, eps) + jnp.log(numerics.softplus(params["scale"]))

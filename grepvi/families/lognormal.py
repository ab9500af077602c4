"""Log-normal variational family.

``log z ~ Normal(mu, sigma^2)``. Standardization (Ruiz, Titsias & Blei 2016, Section 3.1):
``eps = (log z - mu) / sigma`` is standard normal whatever ``(mu, sigma)``, so ``g_corr = 0``
and G-REP reduces to ADVI with a log transform. ``sigma`` is optimized through softplus.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from grepvi import _math
from grepvi.families.base import Family

__all__ = ["LogNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class LogNormal(Family):
    """Mean-field log-normal family; parameters ``{"loc", "scale"}`` (scale unconstrained)."""

    init_loc: float = 0.0
    init_scale: float = 1.0
    init_noise: float = 0.0

    support = "positive"

    def init_params(self, rng_key=None, dtype=jnp.float32):
        loc = jnp.full(self.shape, self.init_loc, dtype)
        if rng_key is not None and self.init_noise > 0:
            loc = loc + self.init_noise * jax.random.normal(rng_key, self.shape, dtype)
        return {
            "loc": loc,
            "scale": _math.inverse_softplus(jnp.full(self.shape, self.init_scale, dtype)),
        }

    def natural_params(self, params):
        return {"loc": params["loc"], "scale": _math.softplus(params["scale"])}

    def sample_standardized(self, params, rng_key, sample_shape=()):
        dtype = jnp.result_type(params["loc"])
        return jax.random.normal(rng_key, tuple(sample_shape) + self.shape, dtype)

    def log_prob(self, params, z):
        loc, scale = params["loc"], _math.softplus(params["scale"])
        log_z = jnp.log(z)
        return -0.5 * ((log_z - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI - log_z

    def entropy(self, params):
        scale = _math.softplus(params["scale"])
        return params["loc"] + 0.5 + jnp.log(scale) + _HALF_LOG_2PI

    def mean(self, params):
        scale = _math.softplus(params["scale"])
        return jnp.exp(params["loc"] + 0.5 * scale**2)

    def variance(self, params):
        scale = _math.softplus(params["scale"])
        return jnp.expm1(scale**2) * jnp.exp(2.0 * params["loc"] + scale**2)

    def standardize(self, params, z):
        return (jnp.log(z) - params["loc"]) / _math.softplus(params["scale"])

    def log_transform(self, params, eps):
        return params["loc"] + _math.softplus(params["scale"]) * eps

    def transform(self, params, eps):
        return _math.safe_exp(self.log_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        return self.log_transform(params, eps) + jnp.log(_math.softplus(params["scale"]))

    def log_prob_standardized(self, params, eps):
        # Standard normal: independent of the parameters (g_corr = 0 exactly).
        return -0.5 * eps**2 - _HALF_LOG_2PI

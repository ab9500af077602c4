"""What the Gaussian-based families share: ``eps ~ Normal(0, 1)``, ``(loc, scale)`` parameters.

``Normal``, ``LogNormal`` and ``LogitNormal`` are ``T(loc + scale eps)`` for a fixed map ``T``
(identity, exp, sigmoid). ``eps`` is standard normal whatever the parameters, so
``log q_eps`` does not depend on them and ``g_corr = 0`` (Ruiz, Titsias & Blei 2016, Eq. 5).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from grepvi import _math
from grepvi.families.base import Family

__all__ = ["LocationScale", "HALF_LOG_2PI"]

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class LocationScale(Family):
    """Base of the Gaussian families; parameters ``{"loc", "scale"}`` (scale through softplus)."""

    init_loc: float = 0.0
    init_scale: float = 1.0
    init_noise: float = 0.0

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

    def log_prob_standardized(self, params, eps):
        # Standard normal: independent of the parameters (g_corr = 0 exactly).
        return -0.5 * eps**2 - HALF_LOG_2PI

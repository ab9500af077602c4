"""Normal variational family (used by ADVI on the unconstrained space).

``z = mu + sigma eps`` with ``eps ~ Normal(0, 1)``: the standard reparameterization
(Ruiz, Titsias & Blei 2016, Eq. 5), for which ``g_corr = 0``.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from grepvi import _math
from grepvi.families.base import Family

__all__ = ["Normal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class Normal(Family):
    """Mean-field normal family; parameters ``{"loc", "scale"}`` (scale unconstrained)."""

    init_loc: float = 0.0
    init_scale: float = 1.0
    init_noise: float = 0.0

    support = "real"

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
        return -0.5 * ((z - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI

    def entropy(self, params):
        return 0.5 + jnp.log(_math.softplus(params["scale"])) + _HALF_LOG_2PI

    def mean(self, params):
        return params["loc"]

    def variance(self, params):
        return _math.softplus(params["scale"]) ** 2

    def standardize(self, params, z):
        return (z - params["loc"]) / _math.softplus(params["scale"])

    def transform(self, params, eps):
        return params["loc"] + _math.softplus(params["scale"]) * eps

    def log_abs_det_jacobian(self, params, eps):
        return jnp.broadcast_to(jnp.log(_math.softplus(params["scale"])), jnp.shape(eps))

    def log_prob_standardized(self, params, eps):
        return -0.5 * eps**2 - _HALF_LOG_2PI

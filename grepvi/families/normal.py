"""Normal variational family (used by ADVI on the unconstrained space).

``z = mu + sigma eps`` with ``eps ~ Normal(0, 1)``: the standard reparameterization
(Ruiz, Titsias & Blei 2016, Eq. 5), for which ``g_corr = 0``.
"""

import dataclasses

import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.location_scale import HALF_LOG_2PI as _HALF_LOG_2PI
from grepvi.families.location_scale import LocationScale

__all__ = ["Normal"]


@dataclasses.dataclass(frozen=True)
class Normal(LocationScale):
    """Mean-field normal family; parameters ``{"loc", "scale"}`` (scale unconstrained)."""

    support = "real"

    def log_prob(self, params, z):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        return -0.5 * ((z - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI

    def entropy(self, params):
        return 0.5 + jnp.log(numerics.softplus(params["scale"])) + _HALF_LOG_2PI

    def mean(self, params):
        return params["loc"]

    def variance(self, params):
        return numerics.softplus(params["scale"]) ** 2

    def standardize(self, params, z):
        return (z - params["loc"]) / numerics.softplus(params["scale"])

    def transform(self, params, eps):
        return params["loc"] + numerics.softplus(params["scale"]) * eps

    def log_abs_det_jacobian(self, params, eps):
        return jnp.broadcast_to(jnp.log(numerics.softplus(params["scale"])), jnp.shape(eps))

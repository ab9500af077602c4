"""What the Gaussian-based families share: ``eps ~ Normal(0, 1)``, ``(loc, scale)`` parameters.

``Normal``, ``LogNormal`` and ``LogitNormal`` are ``T(loc + scale eps)`` for a fixed map ``T``
(identity, exp, sigmoid). ``eps`` is standard normal whatever the parameters, so
``log q_eps`` does not depend on them and ``g_corr = 0`` (Ruiz, Titsias & Blei 2016, Eq. 5).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.base import Family

__all__ = ["LocationScale", "HALF_LOG_2PI", "gaussian_fisher_diagonal"]

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_fisher_diagonal(params):
    """Fisher information of ``Normal(loc, softplus(v)^2)`` in ``(loc, v)``: diagonal,
    ``1 / sigma^2`` and ``2 sigmoid(v)^2 / sigma^2``. A fixed bijection of the variable (exp,
    sigmoid, stick-breaking) leaves it unchanged."""
    sigma = numerics.softplus(params["scale"])
    precision = 1.0 / sigma**2
    return {"loc": precision, "scale": 2.0 * jax.nn.sigmoid(params["scale"]) ** 2 * precision}


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
            "scale": numerics.inverse_softplus(jnp.full(self.shape, self.init_scale, dtype)),
        }

    def natural_params(self, params):
        return {"loc": params["loc"], "scale": numerics.softplus(params["scale"])}

    def narrowed_params(self, params, factor):
        return {**params, "scale": numerics.inverse_softplus(numerics.softplus(params["scale"]) * factor)}

    def has_input_moments(self, log_space: bool) -> bool:
        # ``mu + sigma eps`` is the draw in log space (log z, logit z, z on the real line)
        return bool(log_space) or self.support == "real"

    def input_moments(self, params, log_space: bool):
        """``(mu, sigma^2)``: the input is ``mu + sigma eps`` (see :meth:`has_input_moments`)."""
        scale = numerics.softplus(params["scale"])
        return params["loc"], scale * scale

    def sample_standardized(self, params, rng_key, sample_shape=()):
        dtype = jnp.result_type(params["loc"])
        return jax.random.normal(rng_key, tuple(sample_shape) + self.shape, dtype)

    has_fisher = True
    positive_parameters = ("scale",)

    def fisher_solve(self, params, grad):
        fisher = gaussian_fisher_diagonal(params)
        natural = {key: grad[key] / fisher[key] for key in fisher}
        return natural, sum(grad[key] * natural[key] for key in fisher)

    def fisher_quad(self, params, delta):
        fisher = gaussian_fisher_diagonal(params)
        return sum(fisher[key] * delta[key] ** 2 for key in fisher)

    def log_prob_standardized(self, params, eps):
        # Standard normal: independent of the parameters (g_corr = 0 exactly).
        return -0.5 * eps**2 - HALF_LOG_2PI

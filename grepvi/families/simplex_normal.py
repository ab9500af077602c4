"""Stick-breaking normal family: ADVI's Gaussian on ``R^(K-1)``, seen on the simplex.

ADVI places a Gaussian on the unconstrained space and maps it to the simplex with Stan's
stick-breaking transform (Kucukelbir et al. 2017, Section 2.3; Stan Reference Manual,
"Unit simplex"). With ``y ~ Normal(mu, diag(sigma^2))`` in ``R^(K-1)`` and, for
``k = 0, ..., K-2``::

    u_k     = y_k - log(K - 1 - k)            (y = 0 maps to the centre of the simplex)
    z_k     = sigmoid(u_k)                    (the fraction of the stick broken off)
    x_k     = stick_k z_k,   stick_{k+1} = stick_k (1 - z_k),   stick_0 = 1
    x_{K-1} = stick_{K-1}
    log |dx_{0:K-1} / dy| = sum_k [log z_k + log(1 - z_k) + log stick_k]

so ``log q(x) = sum_k log N(y_k; mu_k, sigma_k^2) - log |dx/dy|``, a density on the first
``K - 1`` coordinates, the same base measure as :class:`grepvi.Dirichlet`'s ``log_prob``.
The standardization ``eps = (y - mu) / sigma`` is standard normal, so ``g_corr = 0``.

The fractions ``z_k`` are independent logit-normals, so the moments factorize
(``E[x_k] = E[z_k] prod_{j<k} E[1 - z_j]``, and likewise for ``E[x_k^2]``), and the entropy is
``H[N(mu, sigma^2)] + sum_k (E[log z_k] + (K - 1 - k) E[log(1 - z_k)])``: every expectation is
one-dimensional and computed by 64-point Gauss-Hermite quadrature (see
:mod:`grepvi.families.logitnormal`). The parameters have shape ``batch + (K - 1,)``.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.base import Family
from grepvi.families.location_scale import gaussian_fisher_diagonal
from grepvi.families.logitnormal import gauss_hermite_expectation

__all__ = ["SimplexNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_sigmoid(x):
    return -jax.nn.softplus(-x)


@dataclasses.dataclass(frozen=True)
class SimplexNormal(Family):
    """Mean-field stick-breaking normal on the simplex; parameters ``{"loc", "scale"}`` of
    shape ``shape[:-1] + (K - 1,)`` (scale unconstrained)."""

    init_loc: float = 0.0
    init_scale: float = 1.0
    init_noise: float = 0.0

    event_ndim = 1
    support = "simplex"

    def __post_init__(self):
        super().__post_init__()
        if len(self.shape) < 1 or self.shape[-1] < 2:
            raise ValueError(f"SimplexNormal: shape must end in an event axis K >= 2, got {self.shape}")

    @property
    def unconstrained_shape(self):
        return self.shape[:-1] + (self.shape[-1] - 1,)

    def _offset(self, dtype):
        k = self.shape[-1]
        return jnp.log(jnp.arange(k - 1, 0, -1, dtype=dtype))

    def init_params(self, rng_key=None, dtype=jnp.float32):
        shape = self.unconstrained_shape
        loc = jnp.full(shape, self.init_loc, dtype)
        if rng_key is not None and self.init_noise > 0:
            loc = loc + self.init_noise * jax.random.normal(rng_key, shape, dtype)
        return {
            "loc": loc,
            "scale": numerics.inverse_softplus(jnp.full(shape, self.init_scale, dtype)),
        }

    def natural_params(self, params):
        return {"loc": params["loc"], "scale": numerics.softplus(params["scale"])}

    def narrowed_params(self, params, factor):
        return {**params, "scale": numerics.inverse_softplus(numerics.softplus(params["scale"]) * factor)}

    has_fisher = True  # the Gaussian's on the K - 1 stick-breaking coordinates
    positive_parameters = ("scale",)

    def fisher_solve(self, params, grad):
        fisher = gaussian_fisher_diagonal(params)
        natural = {key: grad[key] / fisher[key] for key in fisher}
        return natural, sum(jnp.sum(grad[key] * natural[key], -1) for key in fisher)

    def fisher_quad(self, params, delta):
        fisher = gaussian_fisher_diagonal(params)
        return sum(jnp.sum(fisher[key] * delta[key] ** 2, -1) for key in fisher)

    def sample_standardized(self, params, rng_key, sample_shape=()):
        dtype = jnp.result_type(params["loc"])
        return jax.random.normal(rng_key, tuple(sample_shape) + self.unconstrained_shape, dtype)

    # --- the stick-breaking map --------------------------------------------------------
    def _stick_breaking(self, y):
        """``(log x, log |dx/dy|)`` for unconstrained ``y`` (last axis ``K - 1``)."""
        u = y - self._offset(jnp.result_type(y))
        log_z, log_one_minus_z = _log_sigmoid(u), _log_sigmoid(-u)
        cumulative = jnp.cumsum(log_one_minus_z, -1)
        log_stick = jnp.concatenate([jnp.zeros_like(cumulative[..., :1]), cumulative], -1)
        log_x = jnp.concatenate([log_stick[..., :-1] + log_z, log_stick[..., -1:]], -1)
        log_jacobian = jnp.sum(log_z + log_one_minus_z + log_stick[..., :-1], -1)
        return log_x, log_jacobian

    def _unconstrain(self, x):
        """``y`` for a point ``x`` of the simplex (the inverse of the stick-breaking map)."""
        x = x[..., :-1]
        stick = 1.0 - jnp.concatenate([jnp.zeros_like(x[..., :1]), jnp.cumsum(x, -1)[..., :-1]], -1)
        remainder = stick - x
        u = jnp.log(x) - jnp.log(remainder)
        return u + self._offset(jnp.result_type(x))

    def log_prob(self, params, z):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        y = self._unconstrain(z)
        _, log_jacobian = self._stick_breaking(y)
        log_normal = -0.5 * ((y - loc) / scale) ** 2 - jnp.log(scale) - _HALF_LOG_2PI
        return jnp.sum(log_normal, -1) - log_jacobian

    def _fraction_moments(self, params):
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        loc = loc - self._offset(jnp.result_type(loc))
        return loc, scale

    def entropy(self, params):
        loc, scale = self._fraction_moments(params)
        k = self.shape[-1]
        multiplicity = jnp.arange(k - 1, 0, -1, dtype=jnp.result_type(loc))
        expected_log_z = gauss_hermite_expectation(_log_sigmoid, loc, scale)
        expected_log_one_minus_z = gauss_hermite_expectation(lambda x: _log_sigmoid(-x), loc, scale)
        gaussian = 0.5 + jnp.log(scale) + _HALF_LOG_2PI
        return jnp.sum(gaussian + expected_log_z + multiplicity * expected_log_one_minus_z, -1)

    def _factor_moments(self, params):
        """Per fraction: ``E[z]``, ``Var[z]`` (``Var[1 - z]`` is the same)."""
        loc, scale = self._fraction_moments(params)
        mean = gauss_hermite_expectation(jax.nn.sigmoid, loc, scale)
        variance = gauss_hermite_expectation(lambda x: (jax.nn.sigmoid(x) - mean[..., None]) ** 2, loc, scale)
        return mean, variance

    def mean(self, params):
        mean_z, _ = self._factor_moments(params)
        log_stick = jnp.cumsum(jnp.log1p(-mean_z), -1)
        log_stick = jnp.concatenate([jnp.zeros_like(log_stick[..., :1]), log_stick], -1)
        return jnp.exp(jnp.concatenate([log_stick[..., :-1] + jnp.log(mean_z), log_stick[..., -1:]], -1))

    def variance(self, params):
        # x_k is a product of independent factors A_j: Var = E[x]^2 (prod (1 + Var A_j /
        # E[A_j]^2) - 1), computed with expm1/log1p so that small variances stay accurate.
        mean_z, variance_z = self._factor_moments(params)
        log_ratio_z = jnp.log1p(variance_z / mean_z**2)
        log_ratio_stick = jnp.log1p(variance_z / (1.0 - mean_z) ** 2)
        cumulative = jnp.cumsum(log_ratio_stick, -1)
        cumulative = jnp.concatenate([jnp.zeros_like(cumulative[..., :1]), cumulative], -1)
        log_ratio = jnp.concatenate([cumulative[..., :-1] + log_ratio_z, cumulative[..., -1:]], -1)
        return self.mean(params) ** 2 * jnp.expm1(log_ratio)

    # --- standardization ---------------------------------------------------------------
    def standardize(self, params, z):
        return (self._unconstrain(z) - params["loc"]) / numerics.softplus(params["scale"])

    def unconstrained_transform(self, params, eps):
        """``y = mu + sigma eps``."""
        return params["loc"] + numerics.softplus(params["scale"]) * eps

    def log_transform(self, params, eps):
        """``log T(eps; v)``, exact in log space."""
        log_x, _ = self._stick_breaking(self.unconstrained_transform(params, eps))
        return log_x

    def transform(self, params, eps):
        return numerics.safe_exp(self.log_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        _, log_jacobian = self._stick_breaking(self.unconstrained_transform(params, eps))
        return log_jacobian + jnp.sum(jnp.log(numerics.softplus(params["scale"])), -1)

    def log_prob_standardized(self, params, eps):
        return jnp.sum(-0.5 * eps**2 - _HALF_LOG_2PI, -1)

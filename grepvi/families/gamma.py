"""Gamma variational family with the G-REP standardization of ``log z``.

``q(z; alpha, beta) = beta^alpha z^(alpha-1) exp(-beta z) / Gamma(alpha)`` (shape ``alpha``,
rate ``beta``). As in the paper's experiments, it is optimized in shape and *mean*
``m = alpha / beta`` through unconstrained ``v' = log(exp(v) - 1)``.

Standardization (Ruiz, Titsias & Blei 2016, Section 3.1 and supplement B)::

    eps = T^{-1}(z) = (log z - psi(alpha) + log beta) / sqrt(psi_1(alpha))
    z   = T(eps)    = exp(eps sqrt(psi_1(alpha)) + psi(alpha) - log beta)
    log J           = log z + log sqrt(psi_1(alpha))
    log q_eps(eps)  = alpha psi(alpha) + log sqrt(psi_1(alpha)) - log Gamma(alpha)
                      + eps alpha sqrt(psi_1(alpha)) - exp(eps sqrt(psi_1(alpha)) + psi(alpha))

``eps`` has mean 0 and variance 1 for every ``alpha`` and its density does not depend on
``beta``, so ``g_corr`` for the rate is exactly zero.

Numerics: draws are made as ``log z`` (``grepvi.sampling.log_gamma``), so shapes of 1e-3 give
finite ``eps``. The model sees ``z = exp(log z)`` clamped to float's normal range (Gamma(0.1)
variates fall below float32's 1.2e-38 about once in 6,000 draws).
"""

import dataclasses

import jax
import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.base import Family

__all__ = ["Gamma"]


@dataclasses.dataclass(frozen=True)
class Gamma(Family):
    """Mean-field gamma family; parameters ``{"concentration", "mean"}`` (unconstrained).

    Args:
      shape: shape of the latent array.
      init_concentration: initial shape ``alpha``.
      init_mean: initial mean ``alpha / beta``.
      init_noise: relative log-normal jitter of the initial values (needs ``rng_key``), which
        breaks the symmetry between factors of a matrix factorization.
      min_concentration: floor added to the shape, ``alpha = min + softplus(v')``. Below
        ~1e-10 the derivative of ``psi_1`` (``-2 / alpha^3``) times a large log joint
        overflows float32 and every gradient is NaN: with the paper's eta = 5 the first three
        steps of Eq. 9 drove Olivetti's shapes there and the run stalled (benchmarks/
        nan_sweep.py). ``1e-6`` keeps these terms finite for log joints up to ~1e20 and shifts a
        shape of 1e-3 by 0.1%.
      min_mean: floor added to the mean, so that ``beta = alpha / mean`` stays finite.
    """

    init_concentration: float = 1.0
    init_mean: float = 1.0
    init_noise: float = 0.0
    min_concentration: float = 1e-6
    min_mean: float = 1e-30

    support = "positive"

    def init_params(self, rng_key=None, dtype=jnp.float32):
        concentration = jnp.full(self.shape, self.init_concentration, dtype)
        mean = jnp.full(self.shape, self.init_mean, dtype)
        if rng_key is not None and self.init_noise > 0:
            key_a, key_m = jax.random.split(rng_key)
            concentration = concentration * jnp.exp(
                self.init_noise * jax.random.normal(key_a, self.shape, dtype)
            )
            mean = mean * jnp.exp(self.init_noise * jax.random.normal(key_m, self.shape, dtype))
        for name, value, floor in (
            ("init_concentration", self.init_concentration, self.min_concentration),
            ("init_mean", self.init_mean, self.min_mean),
        ):
            if not value > floor:
                raise ValueError(f"Gamma: {name} must exceed {floor:g}, got {value!r}")
        return {
            "concentration": numerics.inverse_softplus(concentration - self.min_concentration),
            "mean": numerics.inverse_softplus(mean - self.min_mean),
        }

    def _concentration(self, params):
        return self.min_concentration + numerics.softplus(params["concentration"])

    def _mean(self, params):
        return self.min_mean + numerics.softplus(params["mean"])

    def narrowed_params(self, params, factor):
        """The shape over ``factor^2`` at the same mean: the standard deviation ``mean /
        sqrt(alpha)`` times ``factor`` (the shape at most ``max_shape``, the natural rule's cap)."""
        concentration = jnp.minimum(self._concentration(params) / factor**2, self.max_shape)
        return {**params, "concentration": numerics.inverse_softplus(concentration - self.min_concentration)}

    def natural_params(self, params):
        concentration = self._concentration(params)
        rate = concentration / self._mean(params)
        return {"concentration": concentration, "rate": rate}

    def has_input_moments(self, log_space: bool) -> bool:
        return bool(log_space)

    def input_moments(self, params, log_space: bool):
        """``E[log z] = psi(alpha) - log beta``, ``Var[log z] = psi_1(alpha)``."""
        a = self._concentration(params)
        return numerics.digamma(a) - self._log_rate(params), numerics.trigamma(a)

    def _log_rate(self, params):
        """``log beta = log alpha - log mean``, and its derivative, finite for tiny means.

        Through ``log(alpha / mean)`` the derivative in the mean is ``(1 / beta)(-alpha /
        mean^2)``; ``mean^2`` underflows float32 below ``mean ~ 1e-19`` and the product is
        ``0 * inf``. BBVI's score drove weights of the MF there at eta = 5 (benchmarks/
        nan_sweep.py).
        """
        return jnp.log(self._concentration(params)) - jnp.log(self._mean(params))

    def sample_log(self, params, rng_key, sample_shape=()):
        """``log z`` for ``z ~ q``: exact where ``z`` itself would underflow."""
        from grepvi.sampling import log_gamma

        concentration = jax.lax.stop_gradient(self._concentration(params))
        log_standard = log_gamma(rng_key, concentration, sample_shape)
        return log_standard - jax.lax.stop_gradient(self._log_rate(params))

    def sample_standardized(self, params, rng_key, sample_shape=()):
        from grepvi.sampling import log_gamma

        concentration = jax.lax.stop_gradient(self._concentration(params))
        log_standard = log_gamma(rng_key, concentration, sample_shape)
        # eps = (log z - psi(a) + log b) / sqrt(psi_1(a)); log z + log b ~ logGamma(a, 1).
        eps = (log_standard - numerics.digamma(concentration)) * jax.lax.rsqrt(
            numerics.trigamma(concentration)
        )
        return jax.lax.stop_gradient(eps)

    def log_prob(self, params, z):
        return self.log_prob_log_space(params, jnp.log(z))

    def log_prob_log_space(self, params, log_z):
        a, log_b = self._concentration(params), self._log_rate(params)
        # b z = alpha exp(log z - log mean): its derivative in the mean, alpha (z / mean) / mean,
        # stays finite where alpha z / mean^2 would overflow.
        return (
            a * log_b
            - numerics.gammaln(a)
            + (a - 1.0) * log_z
            - a * jnp.exp(log_z - jnp.log(self._mean(params)))
        )

    def entropy(self, params):
        a = self._concentration(params)
        return a - self._log_rate(params) + numerics.gammaln(a) + (1.0 - a) * numerics.digamma(a)

    def mean(self, params):
        return self._mean(params)

    def variance(self, params):
        return self._mean(params) ** 2 / self._concentration(params)

    def standardize(self, params, z):
        a = self._concentration(params)
        return (jnp.log(z) - numerics.digamma(a) + self._log_rate(params)) * jax.lax.rsqrt(
            numerics.trigamma(a)
        )

    def log_transform(self, params, eps):
        """``log T(eps; v)``, exact (no underflow)."""
        a = self._concentration(params)
        return eps * jnp.sqrt(numerics.trigamma(a)) + numerics.digamma(a) - self._log_rate(params)

    def transform(self, params, eps):
        return numerics.safe_exp(self.log_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        a = self._concentration(params)
        return self.log_transform(params, eps) + 0.5 * jnp.log(numerics.trigamma(a))

    # --- Fisher information -------------------------------------------------------------
    # In (shape alpha, mean m) the gamma's Fisher information is diagonal:
    # I_alpha = psi_1(alpha) - 1/alpha, I_m = alpha / m^2 (shape and mean are orthogonal
    # parameters; Cox & Reid 1987). Through alpha = floor + softplus(v_alpha) each entry gets
    # the factor sigmoid(v)^2.
    has_fisher = True
    positive_parameters = ("concentration", "mean")
    shape_parameters = ("concentration",)

    def _fisher_diagonal(self, params):
        a = self._concentration(params)
        s_a = jax.nn.sigmoid(params["concentration"])
        # I_m sigmoid(v_m)^2 = alpha / (m / sigmoid(v_m))^2: m / sigmoid(v_m) stays near 1 for
        # tiny means (softplus(v) ~ sigmoid(v) there), so nothing underflows.
        ratio = self._mean(params) / jax.nn.sigmoid(params["mean"])
        return {
            "concentration": s_a**2 * numerics.trigamma_minus_reciprocal(a),
            "mean": a / ratio**2,
        }

    def fisher_solve(self, params, grad):
        fisher = self._fisher_diagonal(params)
        natural = {key: grad[key] / fisher[key] for key in fisher}
        quad = sum(grad[key] * natural[key] for key in fisher)
        return natural, quad

    def fisher_quad(self, params, delta):
        fisher = self._fisher_diagonal(params)
        return sum(fisher[key] * delta[key] ** 2 for key in fisher)

    def log_prob_standardized(self, params, eps):
        a = self._concentration(params)
        sqrt_trigamma = jnp.sqrt(numerics.trigamma(a))
        digamma = numerics.digamma(a)
        return (
            a * digamma
            + jnp.log(sqrt_trigamma)
            - numerics.gammaln(a)
            + eps * a * sqrt_trigamma
            - jnp.exp(eps * sqrt_trigamma + digamma)
        )

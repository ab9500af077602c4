"""Beta variational family with the G-REP standardization of ``logit z``.

``q(z; alpha, beta) = z^(alpha-1) (1-z)^(beta-1) / B(alpha, beta)``, optimized in
``(alpha, beta)`` through softplus, as in the paper.

Standardization (Ruiz, Titsias & Blei 2016, Section 3.1 and supplement C)::

    eps = T^{-1}(z) = (logit z - psi(alpha) + psi(beta)) / sigma(alpha, beta)
    z   = T(eps)    = sigmoid(eps sigma + psi(alpha) - psi(beta))
    log J           = log z + log(1 - z) + log sigma

Two choices of ``sigma``:

* ``standardization="logit"``: ``sigma = sqrt(psi_1(alpha) + psi_1(beta))``, the standard
  deviation of ``logit z``, so ``eps`` has mean 0 and variance 1. G-REP is then *unbiased*.
* ``standardization="zero-correction"``: the paper's choice for its large experiments.
  ``sigma = exp(phi)`` with ``d phi / d alpha`` and ``d phi / d beta`` set, for the drawn
  ``z``, so that ``g_corr = 0`` (supplement C). With ``A = alpha - (alpha + beta) z`` and
  ``w = eps sigma = logit z - psi(alpha) + psi(beta)``::

      d phi/d alpha = -(A psi_1(alpha) + psi(alpha+beta) - psi(alpha) + log z) / (A w + 1)
      d phi/d beta  = -(-A psi_1(beta) + psi(alpha+beta) - psi(beta) + log(1-z)) / (A w + 1)

  The gradient is then ``g_rep`` alone. It is *biased* (the paper's footnote: the dependence
  of ``sigma`` on ``z`` is ignored); ``tests/test_estimators_unbiased.py`` measures the bias.
  Here ``eps`` is stored as ``w`` (``sigma`` never needs a value), and ``|A w + 1|`` is kept
  above ``1e-3`` to avoid division by values near zero.

Draws are made through two log-gamma variates, ``logit z = log g_1 - log g_2``, so tiny
``alpha`` or ``beta`` never produce ``z = 0`` or ``1`` before the final clamp.
"""

import dataclasses

import jax
import jax.numpy as jnp

from grepvi import numerics
from grepvi.families.base import Family

__all__ = ["Beta"]

_STANDARDIZATIONS = ("logit", "zero-correction")


@dataclasses.dataclass(frozen=True)
class Beta(Family):
    """Mean-field beta family; parameters ``{"concentration1", "concentration0"}``.

    ``concentration1`` is ``alpha`` (the exponent of ``z``), ``concentration0`` is ``beta``;
    both are stored unconstrained (softplus inverse).
    """

    init_concentration1: float = 1.0
    init_concentration0: float = 1.0
    init_noise: float = 0.0
    standardization: str = "logit"
    min_concentration: float = 1e-6  # floor added to both, as ``Gamma.min_concentration``

    support = "unit_interval"

    def __post_init__(self):
        super().__post_init__()
        if self.standardization not in _STANDARDIZATIONS:
            raise ValueError(
                f"Beta: standardization must be one of {_STANDARDIZATIONS}, got {self.standardization!r}"
            )

    def init_params(self, rng_key=None, dtype=jnp.float32):
        a = jnp.full(self.shape, self.init_concentration1, dtype)
        b = jnp.full(self.shape, self.init_concentration0, dtype)
        if rng_key is not None and self.init_noise > 0:
            key_a, key_b = jax.random.split(rng_key)
            a = a * jnp.exp(self.init_noise * jax.random.normal(key_a, self.shape, dtype))
            b = b * jnp.exp(self.init_noise * jax.random.normal(key_b, self.shape, dtype))
        return {
            "concentration1": numerics.inverse_softplus(a - self.min_concentration),
            "concentration0": numerics.inverse_softplus(b - self.min_concentration),
        }

    def natural_params(self, params):
        return {
            "concentration1": self.min_concentration + numerics.softplus(params["concentration1"]),
            "concentration0": self.min_concentration + numerics.softplus(params["concentration0"]),
        }

    def narrowed_params(self, params, factor):
        """Both concentrations times ``k`` (the mean kept) with ``k (a + b) + 1 = (a + b + 1) /
        factor^2``: the variance ``a b / ((a + b)^2 (a + b + 1))`` times ``factor^2`` (neither
        concentration above ``max_shape``, the natural rule's cap)."""
        natural = self.natural_params(params)
        a, b = natural["concentration1"], natural["concentration0"]
        total = a + b
        k = jnp.minimum(((total + 1.0) / factor**2 - 1.0) / total, self.max_shape / jnp.maximum(a, b))
        return {
            "concentration1": numerics.inverse_softplus(k * a - self.min_concentration),
            "concentration0": numerics.inverse_softplus(k * b - self.min_concentration),
        }

    def has_input_moments(self, log_space: bool) -> bool:
        return bool(log_space)

    def input_moments(self, params, log_space: bool):
        """``E[logit z] = psi(a) - psi(b)``, ``Var[logit z] = psi_1(a) + psi_1(b)``."""
        a, b = self._ab(params)
        return numerics.digamma(a) - numerics.digamma(b), numerics.trigamma(a) + numerics.trigamma(b)

    def _ab(self, params):
        natural = self.natural_params(params)
        return natural["concentration1"], natural["concentration0"]

    def _sigma(self, a, b):
        return jnp.sqrt(numerics.trigamma(a) + numerics.trigamma(b))

    def sample_logit(self, params, rng_key, sample_shape=()):
        """``logit z`` for ``z ~ q``, from two log-gamma draws."""
        from grepvi.sampling import log_gamma

        a, b = jax.lax.stop_gradient(self._ab(params))
        key_a, key_b = jax.random.split(rng_key)
        return log_gamma(key_a, a, sample_shape) - log_gamma(key_b, b, sample_shape)

    def sample_standardized(self, params, rng_key, sample_shape=()):
        a, b = jax.lax.stop_gradient(self._ab(params))
        centred = self.sample_logit(params, rng_key, sample_shape) - (
            numerics.digamma(a) - numerics.digamma(b)
        )
        if self.standardization == "zero-correction":
            return jax.lax.stop_gradient(centred)
        return jax.lax.stop_gradient(centred / self._sigma(a, b))

    def log_prob(self, params, z):
        a, b = self._ab(params)
        return (a - 1.0) * jnp.log(z) + (b - 1.0) * jnp.log1p(-z) - numerics.betaln_direct(a, b)

    def log_prob_log_space(self, params, logit):
        a, b = self._ab(params)
        log_z, log_one_minus_z = jax.nn.log_sigmoid(logit), jax.nn.log_sigmoid(-logit)
        return (a - 1.0) * log_z + (b - 1.0) * log_one_minus_z - numerics.betaln_direct(a, b)

    def entropy(self, params):
        a, b = self._ab(params)
        return (
            numerics.betaln_direct(a, b)
            - (a - 1.0) * numerics.digamma(a)
            - (b - 1.0) * numerics.digamma(b)
            + (a + b - 2.0) * numerics.digamma(a + b)
        )

    def mean(self, params):
        a, b = self._ab(params)
        return a / (a + b)

    def log_space_mean(self, params):
        """``logit E[z] = log a - log b``, exact where ``a / (a + b)`` rounds to 0 or 1."""
        a, b = self._ab(params)
        return jnp.log(a) - jnp.log(b)

    # --- Fisher information -------------------------------------------------------------
    # In (alpha, beta): [[psi_1(a) - psi_1(a+b), -psi_1(a+b)], [-psi_1(a+b), psi_1(b) -
    # psi_1(a+b)]], the Hessian of log B(a, b); scaled by the softplus derivatives.
    has_fisher = True
    positive_parameters = ("concentration1", "concentration0")
    shape_parameters = ("concentration1", "concentration0")
    max_shape = 1e6  # psi_1(a) - psi_1(a + b) of the Fisher information cancels to 0 near 3e6

    def _fisher_block(self, params):
        a, b = self._ab(params)
        s_a = jax.nn.sigmoid(params["concentration1"])
        s_b = jax.nn.sigmoid(params["concentration0"])
        t_a, t_b, t_c = numerics.trigamma(a), numerics.trigamma(b), numerics.trigamma(a + b)
        return (
            s_a**2 * (t_a - t_c),
            -s_a * s_b * t_c,
            s_b**2 * (t_b - t_c),
            (s_a * s_b) ** 2 * (t_a * t_b - t_c * (t_a + t_b)),
        )

    def fisher_solve(self, params, grad):
        f_aa, f_ab, f_bb, det = self._fisher_block(params)
        g_a, g_b = grad["concentration1"], grad["concentration0"]
        n_a = (f_bb * g_a - f_ab * g_b) / det
        n_b = (f_aa * g_b - f_ab * g_a) / det
        return {"concentration1": n_a, "concentration0": n_b}, g_a * n_a + g_b * n_b

    def fisher_quad(self, params, delta):
        f_aa, f_ab, f_bb, _ = self._fisher_block(params)
        d_a, d_b = delta["concentration1"], delta["concentration0"]
        return f_aa * d_a**2 + 2.0 * f_ab * d_a * d_b + f_bb * d_b**2

    def variance(self, params):
        a, b = self._ab(params)
        total = a + b
        return a * b / (total**2 * (total + 1.0))

    def standardize(self, params, z):
        a, b = self._ab(params)
        centred = jnp.log(z) - jnp.log1p(-z) - numerics.digamma(a) + numerics.digamma(b)
        if self.standardization == "zero-correction":
            return centred
        return centred / self._sigma(a, b)

    def logit_transform(self, params, eps):
        """``logit T(eps; v)``; for the zero-correction variant its derivative in ``v`` is
        ``psi_1(alpha) + w dphi/dalpha`` (and likewise for beta), supplement C."""
        a, b = self._ab(params)
        location = numerics.digamma(a) - numerics.digamma(b)
        if self.standardization == "logit":
            return eps * self._sigma(a, b) + location
        w = jax.lax.stop_gradient(eps)
        a_value, b_value = jax.lax.stop_gradient((a, b))
        logit = w + jax.lax.stop_gradient(location)
        dphi_da, dphi_db = zero_correction_dphi(a_value, b_value, w, logit)
        moving = location + w * (dphi_da * a + dphi_db * b)
        return logit + (moving - jax.lax.stop_gradient(moving))

    def transform(self, params, eps):
        return numerics.safe_sigmoid(self.logit_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        logit = self.logit_transform(params, eps)
        log_z_one_minus_z = -jax.nn.softplus(-logit) - jax.nn.softplus(logit)
        if self.standardization == "zero-correction":
            return jax.lax.stop_gradient(log_z_one_minus_z)
        a, b = self._ab(params)
        return log_z_one_minus_z + jnp.log(self._sigma(a, b))

    def log_prob_standardized(self, params, eps):
        if self.standardization == "zero-correction":
            # sigma is chosen so that d/dv log q_eps = 0 at the drawn sample: no g_corr.
            return jnp.zeros(jnp.shape(eps), jnp.result_type(eps))
        a, b = self._ab(params)
        logit = self.logit_transform(params, eps)
        # a log z + b log(1-z) - log B(a,b) + log sigma, in terms of logit z (stable).
        return (
            -a * jax.nn.softplus(-logit)
            - b * jax.nn.softplus(logit)
            - numerics.betaln_direct(a, b)
            + jnp.log(self._sigma(a, b))
        )


def zero_correction_dphi(a, b, w, logit):
    """``d phi / d alpha`` and ``d phi / d beta`` that zero ``g_corr`` (supplement C)."""
    z = jax.nn.sigmoid(logit)
    log_z = -jax.nn.softplus(-logit)
    log_one_minus_z = -jax.nn.softplus(logit)
    coefficient = a - (a + b) * z
    denominator = coefficient * w + 1.0
    denominator = jnp.where(jnp.abs(denominator) < 1e-3, jnp.where(denominator < 0, -1e-3, 1e-3), denominator)
    digamma_total = numerics.digamma(a + b)
    dphi_da = -(coefficient * numerics.trigamma(a) + digamma_total - numerics.digamma(a) + log_z)
    dphi_db = -(-coefficient * numerics.trigamma(b) + digamma_total - numerics.digamma(b) + log_one_minus_z)
    return dphi_da / denominator, dphi_db / denominator

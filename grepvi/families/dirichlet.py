"""Dirichlet variational family with the G-REP standardization of ``log z``.

``q(z; alpha) = Gamma(alpha_0) / prod_k Gamma(alpha_k) prod_k z_k^(alpha_k - 1)`` on the
simplex, ``alpha_0 = sum_k alpha_k``; the last axis of ``shape`` is the event axis ``K``.

Standardizations (Ruiz, Titsias & Blei 2016, supplement D)::

    mu    = E[log z]       = psi(alpha) - psi(alpha_0)
    Sigma = Cov[log z]     = diag(psi_1(alpha)) - psi_1(alpha_0) 1 1^T
    z     = T(eps)         = exp(Sigma^{1/2} eps + mu)
    log J                  = log det Sigma^{1/2} + sum_k log z_k

* ``"full"``: the symmetric square root ``Sigma^{1/2} = V D^{1/2} V^T`` from ``eigh``;
  gradients flow through the eigendecomposition by autodiff (replacing the supplement's
  Lyapunov equations).
* ``"diagonal"``: only the diagonal of ``Sigma`` (the supplement's footnote: cheaper, more
  variance).
* ``"gamma"``: ``z = g / sum(g)`` with ``g_k ~ Gamma(alpha_k, 1)`` standardized as the gamma
  family does. ``eps`` is then the K standardized gammas; ``T`` maps K numbers to the simplex.
  Exact and unbiased for any ``f``.

The first two treat ``T`` as a map of R^K although ``log z`` lies on a (K-1)-dimensional
surface; ``tests/test_estimators_unbiased.py`` measures what that costs.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, logsumexp

from grepvi import _math
from grepvi.families.base import Family

__all__ = ["Dirichlet"]

_STANDARDIZATIONS = ("full", "diagonal", "gamma")


@dataclasses.dataclass(frozen=True)
class Dirichlet(Family):
    """Mean-field (over the batch axes) Dirichlet family; parameters ``{"concentration"}``."""

    init_concentration: float = 1.0
    init_noise: float = 0.0
    standardization: str = "full"

    event_ndim = 1
    support = "simplex"

    def __post_init__(self):
        super().__post_init__()
        if len(self.shape) < 1 or self.shape[-1] < 2:
            raise ValueError(f"Dirichlet: shape must end in an event axis K >= 2, got {self.shape}")
        if self.standardization not in _STANDARDIZATIONS:
            raise ValueError(
                f"Dirichlet: standardization must be one of {_STANDARDIZATIONS}, "
                f"got {self.standardization!r}"
            )

    def init_params(self, rng_key=None, dtype=jnp.float32):
        a = jnp.full(self.shape, self.init_concentration, dtype)
        if rng_key is not None and self.init_noise > 0:
            a = a * jnp.exp(self.init_noise * jax.random.normal(rng_key, self.shape, dtype))
        return {"concentration": _math.inverse_softplus(a)}

    def natural_params(self, params):
        return {"concentration": _math.softplus(params["concentration"])}

    def _alpha(self, params):
        return _math.softplus(params["concentration"])

    def _moments(self, alpha):
        """``mu``, ``Sigma^{1/2}`` (or its diagonal) and ``log det Sigma^{1/2}``."""
        total = jnp.sum(alpha, -1, keepdims=True)
        mu = _math.digamma(alpha) - _math.digamma(total)
        if self.standardization == "diagonal":
            variance = _math.trigamma(alpha) - _math.trigamma(total)
            return mu, jnp.sqrt(variance), 0.5 * jnp.sum(jnp.log(variance), -1)
        k = alpha.shape[-1]
        sigma = jnp.einsum("...i,ij->...ij", _math.trigamma(alpha), jnp.eye(k, dtype=alpha.dtype))
        sigma = sigma - _math.trigamma(total)[..., None]
        eigenvalues, eigenvectors = jnp.linalg.eigh(sigma)
        eigenvalues = jnp.maximum(eigenvalues, jnp.finfo(alpha.dtype).tiny)
        sqrt_sigma = jnp.einsum(
            "...ik,...k,...jk->...ij", eigenvectors, jnp.sqrt(eigenvalues), eigenvectors
        )
        inverse_sqrt = jnp.einsum(
            "...ik,...k,...jk->...ij", eigenvectors, jax.lax.rsqrt(eigenvalues), eigenvectors
        )
        return mu, (sqrt_sigma, inverse_sqrt), 0.5 * jnp.sum(jnp.log(eigenvalues), -1)

    def sample_log(self, params, rng_key, sample_shape=()):
        """``log z`` for ``z ~ q`` (log-gamma draws normalized in log space)."""
        from grepvi.sampling import log_gamma

        alpha = jax.lax.stop_gradient(self._alpha(params))
        log_g = log_gamma(rng_key, alpha, sample_shape)
        return log_g - logsumexp(log_g, -1, keepdims=True)

    def sample_standardized(self, params, rng_key, sample_shape=()):
        from grepvi.sampling import log_gamma

        alpha = jax.lax.stop_gradient(self._alpha(params))
        if self.standardization == "gamma":
            log_g = log_gamma(rng_key, alpha, sample_shape)
            eps = (log_g - _math.digamma(alpha)) * jax.lax.rsqrt(_math.trigamma(alpha))
            return jax.lax.stop_gradient(eps)
        log_z = self.sample_log(params, rng_key, sample_shape)
        return jax.lax.stop_gradient(self._standardize_log(alpha, log_z))

    def _standardize_log(self, alpha, log_z):
        mu, root, _ = self._moments(alpha)
        if self.standardization == "diagonal":
            return (log_z - mu) / root
        return jnp.einsum("...ij,...j->...i", root[1], log_z - mu)

    def log_prob(self, params, z):
        alpha = self._alpha(params)
        return (
            gammaln(jnp.sum(alpha, -1))
            - jnp.sum(gammaln(alpha), -1)
            + jnp.sum((alpha - 1.0) * jnp.log(z), -1)
        )

    def entropy(self, params):
        alpha = self._alpha(params)
        total = jnp.sum(alpha, -1)
        k = alpha.shape[-1]
        log_beta = jnp.sum(gammaln(alpha), -1) - gammaln(total)
        return (
            log_beta
            + (total - k) * _math.digamma(total)
            - jnp.sum((alpha - 1.0) * _math.digamma(alpha), -1)
        )

    def mean(self, params):
        alpha = self._alpha(params)
        return alpha / jnp.sum(alpha, -1, keepdims=True)

    def variance(self, params):
        alpha = self._alpha(params)
        total = jnp.sum(alpha, -1, keepdims=True)
        return alpha * (total - alpha) / (total**2 * (total + 1.0))

    def standardize(self, params, z):
        if self.standardization == "gamma":
            raise NotImplementedError(
                "Dirichlet(standardization='gamma') draws eps from K gammas; z alone does "
                "not determine it"
            )
        return self._standardize_log(self._alpha(params), jnp.log(z))

    def log_transform(self, params, eps):
        alpha = self._alpha(params)
        if self.standardization == "gamma":
            log_g = eps * jnp.sqrt(_math.trigamma(alpha)) + _math.digamma(alpha)
            return log_g - logsumexp(log_g, -1, keepdims=True)
        mu, root, _ = self._moments(alpha)
        if self.standardization == "diagonal":
            return root * eps + mu
        return jnp.einsum("...ij,...j->...i", root[0], eps) + mu

    def transform(self, params, eps):
        return _math.safe_exp(self.log_transform(params, eps))

    def log_abs_det_jacobian(self, params, eps):
        if self.standardization == "gamma":
            raise NotImplementedError("T maps R^K onto the simplex: no Jacobian determinant")
        _, _, log_det_root = self._moments(self._alpha(params))
        return log_det_root + jnp.sum(self.log_transform(params, eps), -1)

    def log_prob_standardized(self, params, eps):
        alpha = self._alpha(params)
        if self.standardization == "gamma":
            sqrt_trigamma = jnp.sqrt(_math.trigamma(alpha))
            digamma = _math.digamma(alpha)
            per_component = (
                alpha * digamma
                + jnp.log(sqrt_trigamma)
                - gammaln(alpha)
                + eps * alpha * sqrt_trigamma
                - jnp.exp(eps * sqrt_trigamma + digamma)
            )
            return jnp.sum(per_component, -1)
        log_z = self.log_transform(params, eps)
        _, _, log_det_root = self._moments(alpha)
        log_q = (
            gammaln(jnp.sum(alpha, -1))
            - jnp.sum(gammaln(alpha), -1)
            + jnp.sum((alpha - 1.0) * log_z, -1)
        )
        return log_q + log_det_root + jnp.sum(log_z, -1)

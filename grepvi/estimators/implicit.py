"""Implicit reparameterization gradients through JAX's gamma sampler.

Figurnov, Mohamed & Mnih (2018), Eq. 5: for ``z`` drawn with CDF ``F(z; v)``, the pathwise
derivative is obtained without inverting ``F``::

    d z / d v = - (d F(z; v) / d v) / q(z; v)

and ``grad L = E_q[ grad_z f(z) d z / d v ] + grad H(v)``. JAX implements this rule for
``jax.random.gamma`` / ``loggamma`` (``random_gamma_grad``), and builds ``beta`` and
``dirichlet`` from normalized gammas; this estimator draws through ``jax.random.loggamma``
in log space so that small shapes never give ``z = 0``:

* Gamma(alpha, beta): ``log z = loggamma(alpha) - log beta``;
* Beta(alpha, beta): ``logit z = loggamma(alpha) - loggamma(beta)``;
* Dirichlet(alpha): ``log z = loggamma(alpha) - logsumexp(loggamma(alpha))``;
* families whose standardized density does not depend on the parameters (log-normal,
  normal, logit-normal, stick-breaking normal): the plain reparameterization
  ``z = T(eps; v)``.

The estimator is the gradient of the surrogate ``f(z(v)) + H(v)`` (its value is the ELBO
estimate). It is unbiased up to the accuracy of JAX's implicit gamma derivative.

References:
  M. Figurnov, S. Mohamed and A. Mnih, "Implicit reparameterization gradients", NeurIPS 2018.
"""

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from grepvi import numerics
from grepvi.errors import ConfigError
from grepvi.estimators.base import (
    EstimateInfo,
    Estimator,
    register_estimator,
    total_entropy,
)
from grepvi.estimators.grep import multi_sample
from grepvi.families.beta import Beta
from grepvi.families.dirichlet import Dirichlet
from grepvi.families.gamma import Gamma
from grepvi.families.generalized_dirichlet import GeneralizedDirichlet
from grepvi.families.logitnormal import LogitNormal
from grepvi.families.lognormal import LogNormal
from grepvi.families.normal import Normal
from grepvi.families.simplex_normal import SimplexNormal
from grepvi.validation import positive_int

__all__ = ["implicit", "implicit_latent", "pathwise_surrogate", "PARAMETER_FREE_FAMILIES"]

# Families whose standardized variable is N(0, 1) whatever the parameters: g_corr = 0.
PARAMETER_FREE_FAMILIES = (LogNormal, Normal, LogitNormal, SimplexNormal)


def _clamped_sigmoid(logit):
    finfo = jnp.finfo(jnp.result_type(logit))
    return jnp.clip(jax.nn.sigmoid(logit), finfo.tiny, 1.0 - finfo.epsneg)


def implicit_latent(family, params, rng_key, log_space=False):
    """One draw ``z(v)`` of ``family``, differentiable in ``params`` (implicitly for
    gamma-based families); in the log space of its support with ``log_space``."""
    if isinstance(family, Gamma):
        natural = family.natural_params(params)
        log_g = jax.random.loggamma(rng_key, natural["concentration"], family.shape)
        log_z = log_g - jnp.log(natural["rate"])
        return log_z if log_space else numerics.safe_exp(log_z)
    if isinstance(family, Beta):
        natural = family.natural_params(params)
        key_a, key_b = jax.random.split(rng_key)
        logit = jax.random.loggamma(key_a, natural["concentration1"], family.shape) - jax.random.loggamma(
            key_b, natural["concentration0"], family.shape
        )
        return logit if log_space else _clamped_sigmoid(logit)
    if isinstance(family, GeneralizedDirichlet):  # beta sticks, broken off in log space
        natural = family.natural_params(params)
        key_a, key_b = jax.random.split(rng_key)
        stick_shape = family.sticks.shape
        logit = jax.random.loggamma(key_a, natural["concentration1"], stick_shape) - jax.random.loggamma(
            key_b, natural["concentration0"], stick_shape
        )
        log_z = family.log_x_from_logits(logit)
        return log_z if log_space else numerics.safe_exp(log_z)
    if isinstance(family, Dirichlet):
        alpha = family.natural_params(params)["concentration"]
        log_g = jax.random.loggamma(rng_key, alpha, family.shape)
        log_z = log_g - logsumexp(log_g, -1, keepdims=True)
        return log_z if log_space else numerics.safe_exp(log_z)
    if isinstance(family, PARAMETER_FREE_FAMILIES):
        eps = family.sample_standardized(params, rng_key)
        return family.log_space_transform(params, eps) if log_space else family.transform(params, eps)
    raise ConfigError(
        f"implicit: no implicit or standard reparameterization for {type(family).__name__}; "
        "use estimator='grep' (any family with a standardization) or 'bbvi' (any family)"
    )


def pathwise_surrogate(params, latents_fn, target):
    """``f(z(v)) + H(v)`` and its value (the ELBO estimate), for a pathwise ``z(v)``."""
    latents = latents_fn(params)
    elbo = target.logdensity_fn(latents) + total_entropy(params, target.families)
    return elbo, elbo


@register_estimator("implicit")
def implicit(num_samples: int = 1, compute_variance: bool = False) -> Estimator:
    """Implicit reparameterization (Figurnov et al. 2018) averaged over ``num_samples`` draws."""
    num_samples = positive_int(num_samples, "num_samples")

    def single(rng_key, params, target):
        families = target.families
        keys = dict(zip(sorted(families), jax.random.split(rng_key, len(families)), strict=True))

        def latents_fn(p):
            return {
                name: implicit_latent(family, p[name], keys[name], target.log_space)
                for name, family in families.items()
            }

        grad, elbo = jax.grad(pathwise_surrogate, has_aux=True)(params, latents_fn, target)
        return grad, EstimateInfo(elbo=elbo, extras={})

    return Estimator(
        name="implicit",
        estimate=multi_sample(single, num_samples, compute_variance),
        options={"num_samples": num_samples, "compute_variance": compute_variance},
    )

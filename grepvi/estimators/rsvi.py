"""Rejection sampling variational inference (RSVI): reparameterization through the
Marsaglia-Tsang gamma sampler, with shape augmentation.

Naesseth, Ruiz, Linderman & Blei (2017), Sections 3-5. Marsaglia & Tsang propose
``z = h(eps; alpha) = (alpha - 1/3) (1 + eps / sqrt(9 alpha - 3))^3`` with ``eps ~ N(0, 1)``
and accept with a probability that makes ``z ~ Gamma(alpha, 1)``. The *accepted* ``eps`` has
density (their Eq. 6)::

    pi(eps; alpha) = q(h(eps; alpha); alpha) |d h(eps; alpha) / d eps|
    log pi         = (alpha - 1) log h - h - log Gamma(alpha) + log sqrt(d) + 2 log(1 + c eps),
                     d = alpha - 1/3,  c = 1 / sqrt(9 d)

and the gradient is (their Eqs. 7-8) ``g_rep + g_cor + grad H`` with::

    g_rep = E_pi[ grad_z f(h(eps; v)) grad_v h(eps; v) ]
    g_cor = E_pi[ f(h(eps; v)) grad_v log pi(eps; v) ]

Shape augmentation (their Section 5, Eq. 12) makes the sampler valid for ``alpha < 1`` and
shrinks ``g_cor``: with ``B`` uniforms ``u_i``::

    z = h(eps; alpha + B) prod_{i=0}^{B-1} u_i^{1 / (alpha + i)} ~ Gamma(alpha, 1)

where ``eps ~ pi(.; alpha + B)``; only ``eps`` carries a correction term,
``f(z) grad log pi(eps; alpha + B)``. The rate enters as ``z / beta`` (plain
reparameterization). Beta and Dirichlet variables are normalized gammas (``logit z =
log g_1 - log g_2``; ``log z = log g - logsumexp(log g)``) with one correction term per gamma.
With ``correction=False`` the estimator is ``g_rep`` alone, the common practice for
``B >= 1``; it is then biased, by an amount that falls quickly with ``B`` (measured in
``tests/test_estimators_unbiased.py`` and ``docs/estimators.md``).

As for G-REP, both terms are the gradient of one surrogate,
``f(z(v)) + sum_i stop_gradient(f_i(z)) log pi(eps_i; v_i) + H(v)``, with ``f_i`` the local
log joint of element ``i``.

Sampling: ``eps`` is not drawn by running the rejection sampler again. Since ``h`` is
increasing, the accepted ``eps`` is ``h^{-1}(g; alpha + B)`` for ``g ~ Gamma(alpha + B)``
(drawn by :func:`grepvi.sampling.log_gamma`), ``eps = sqrt(9 d) expm1((log g - log d) / 3)``;
this has density ``pi`` exactly. Families other than gamma, beta and Dirichlet that have a
parameter-free standardization (log-normal, normal, ...) use the plain reparameterization.

References:
  C. A. Naesseth, F. J. R. Ruiz, S. W. Linderman and D. M. Blei, "Reparameterization
  gradients through acceptance-rejection sampling algorithms", AISTATS 2017.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, logsumexp

from grepvi import numerics
from grepvi.errors import ConfigError
from grepvi.estimators.base import EstimateInfo, Estimator, register_estimator, total_entropy
from grepvi.estimators.grep import multi_sample
from grepvi.estimators.implicit import PARAMETER_FREE_FAMILIES
from grepvi.families.beta import Beta
from grepvi.families.dirichlet import Dirichlet
from grepvi.families.gamma import Gamma
from grepvi.families.generalized_dirichlet import GeneralizedDirichlet
from grepvi.target import local_log_joints
from grepvi.validation import positive_int

__all__ = [
    "rsvi",
    "GammaNoise",
    "sample_gamma_noise",
    "log_gamma_reparameterized",
    "log_proposal_density",
]


class GammaNoise(NamedTuple):
    """The noise of one shape-augmented Marsaglia-Tsang draw (no gradient)."""

    eps: jax.Array  # accepted standard-normal proposal, eps ~ pi(.; alpha + B)
    log_uniforms: jax.Array  # (B,) + shape: log u_i


def _mt_constants(shape):
    d = shape - 1.0 / 3.0
    return d, jax.lax.rsqrt(9.0 * d)


def sample_gamma_noise(rng_key, alpha, boost: int, sample_shape=()) -> GammaNoise:
    """Noise ``(eps, log u)`` such that :func:`log_gamma_reparameterized` is a
    ``logGamma(alpha, 1)`` draw."""
    from grepvi.sampling import log_gamma

    alpha = jax.lax.stop_gradient(alpha)
    key_gamma, key_uniform = jax.random.split(rng_key)
    boosted = alpha + boost
    log_g = log_gamma(key_gamma, boosted, sample_shape)
    d, c = _mt_constants(boosted)
    eps = jnp.expm1((log_g - jnp.log(d)) / 3.0) / c
    shape = tuple(sample_shape) + jnp.shape(alpha)
    dtype = jnp.result_type(alpha)
    uniforms = jax.random.uniform(
        key_uniform, (boost,) + shape, dtype, minval=jnp.finfo(dtype).tiny, maxval=1.0
    )
    return GammaNoise(jax.lax.stop_gradient(eps), jax.lax.stop_gradient(jnp.log(uniforms)))


def log_gamma_reparameterized(alpha, noise: GammaNoise):
    """``log z`` with ``z = h(eps; alpha + B) prod_i u_i^{1/(alpha + i)}``, differentiable in
    ``alpha`` (Naesseth et al. 2017, Eq. 12)."""
    boost = noise.log_uniforms.shape[0]
    d, c = _mt_constants(alpha + boost)
    log_h = jnp.log(d) + 3.0 * jnp.log1p(c * noise.eps)
    offsets = jnp.arange(boost, dtype=jnp.result_type(alpha))
    offsets = offsets.reshape((boost,) + (1,) * jnp.ndim(noise.eps))
    return log_h + jnp.sum(noise.log_uniforms / (alpha + offsets), 0)


def log_proposal_density(alpha, noise: GammaNoise):
    """``log pi(eps; alpha + B)``, the density of the accepted proposal (Naesseth et al. 2017,
    Eq. 6), differentiable in ``alpha``."""
    boosted = alpha + noise.log_uniforms.shape[0]
    d, c = _mt_constants(boosted)
    log_v = jnp.log1p(c * noise.eps)
    log_h = jnp.log(d) + 3.0 * log_v
    return (boosted - 1.0) * log_h - jnp.exp(log_h) - gammaln(boosted) + 0.5 * jnp.log(d) + 2.0 * log_v


def _clamped_sigmoid(logit):
    finfo = jnp.finfo(jnp.result_type(logit))
    return jnp.clip(jax.nn.sigmoid(logit), finfo.tiny, 1.0 - finfo.epsneg)


def _gamma_shapes(family, params):
    """The gamma shapes behind a gamma, beta or Dirichlet family (differentiable)."""
    natural = family.natural_params(params)
    if isinstance(family, Gamma):
        return (natural["concentration"],)
    if isinstance(family, Beta | GeneralizedDirichlet):  # a generalized Dirichlet's beta sticks
        return (natural["concentration1"], natural["concentration0"])
    return (natural["concentration"],)


def _draw_noise(family, params, rng_key, boost):
    if isinstance(family, Gamma | Beta | Dirichlet | GeneralizedDirichlet):
        shapes = _gamma_shapes(family, params)
        keys = jax.random.split(rng_key, len(shapes))
        return tuple(sample_gamma_noise(key, shape, boost) for key, shape in zip(keys, shapes, strict=True))
    if isinstance(family, PARAMETER_FREE_FAMILIES):
        return family.sample_standardized(params, rng_key)
    raise ConfigError(
        f"rsvi: no rejection-sampler reparameterization for {type(family).__name__}; "
        "use estimator='grep' (any family with a standardization) or 'bbvi' (any family)"
    )


def _latent(family, params, noise, log_space=False):
    """The reparameterized draw, as a value or in the log space of the support."""
    if isinstance(family, PARAMETER_FREE_FAMILIES):
        return family.log_space_transform(params, noise) if log_space else family.transform(params, noise)
    shapes = _gamma_shapes(family, params)
    log_g = [log_gamma_reparameterized(a, n) for a, n in zip(shapes, noise, strict=True)]
    if isinstance(family, Gamma):
        log_z = log_g[0] - jnp.log(family.natural_params(params)["rate"])
        return log_z if log_space else numerics.safe_exp(log_z)
    if isinstance(family, Beta):
        logit = log_g[0] - log_g[1]
        return logit if log_space else _clamped_sigmoid(logit)
    if isinstance(family, GeneralizedDirichlet):  # the sticks' logits, broken off in log space
        log_z = family.log_x_from_logits(log_g[0] - log_g[1])
        return log_z if log_space else numerics.safe_exp(log_z)
    log_z = log_g[0] - logsumexp(log_g[0], -1, keepdims=True)
    return log_z if log_space else numerics.safe_exp(log_z)


def _log_pi(family, params, noise):
    """Per element (batch shape): the sum of ``log pi`` over the element's gammas."""
    if isinstance(family, PARAMETER_FREE_FAMILIES):
        return None
    shapes = _gamma_shapes(family, params)
    total = sum(log_proposal_density(a, n) for a, n in zip(shapes, noise, strict=True))
    if family.event_ndim:
        total = jnp.sum(total, tuple(range(-family.event_ndim, 0)))
    return total


def rsvi_surrogate(params, noise, target, correction=True):
    """Surrogate whose gradient is one RSVI sample and whose value is the ELBO estimate."""
    families = target.families
    latents = {
        name: _latent(family, params[name], noise[name], target.log_space)
        for name, family in families.items()
    }
    log_joint = target.logdensity_fn(latents)
    elbo = log_joint + total_entropy(params, families)
    if not correction:
        return elbo, elbo
    if target.local_logdensity_fn is None:
        local = {
            name: jnp.broadcast_to(jax.lax.stop_gradient(log_joint), family.batch_shape)
            for name, family in families.items()
        }
    else:
        local = local_log_joints(target, jax.lax.stop_gradient(latents))
    term = 0.0
    for name, family in families.items():
        log_pi = _log_pi(family, params[name], noise[name])
        if log_pi is not None:
            term = term + jnp.sum(jax.lax.stop_gradient(local[name]) * log_pi)
    return elbo + term - jax.lax.stop_gradient(term), elbo


@register_estimator("rsvi")
def rsvi(
    num_samples: int = 1,
    boost: int = 4,
    correction: bool = True,
    compute_variance: bool = False,
) -> Estimator:
    """RSVI with shape augmentation ``boost = B`` (1 to 4 in the paper; default 4).

    Args:
      num_samples: draws averaged per gradient.
      boost: shape augmentation ``B >= 1``; larger ``B`` shrinks the correction term.
      correction: include ``g_cor`` (unbiased); ``False`` keeps ``g_rep`` only (biased).
      compute_variance: report ``gradient_variance`` (per-draw, needs ``num_samples > 1``).
    """
    num_samples = positive_int(num_samples, "num_samples")
    boost = positive_int(boost, "boost")

    def single(rng_key, params, target):
        families = target.families
        keys = dict(zip(sorted(families), jax.random.split(rng_key, len(families)), strict=True))
        noise = {
            name: _draw_noise(family, jax.lax.stop_gradient(params[name]), keys[name], boost)
            for name, family in families.items()
        }
        grad, elbo = jax.grad(rsvi_surrogate, has_aux=True)(params, noise, target, correction)
        return grad, EstimateInfo(elbo=elbo, extras={})

    return Estimator(
        name="rsvi",
        estimate=multi_sample(single, num_samples, compute_variance),
        options={
            "num_samples": num_samples,
            "boost": boost,
            "correction": correction,
            "compute_variance": compute_variance,
        },
    )

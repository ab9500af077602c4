"""Automatic differentiation variational inference (ADVI): a Gaussian on the unconstrained space.

Kucukelbir, Tran, Ranganath, Gelman & Blei (2017), Sections 2.3-2.5. Each latent is mapped to
``R^n`` by a fixed bijection ``zeta = T(z)`` and approximated there by a mean-field Gaussian
``N(mu, diag(sigma^2))``; seen on the original space this is a log-normal (positive latents),
a logit-normal (unit interval), a stick-breaking normal (simplex) or a normal (real line).
:func:`advi_family` makes that map, and ``adapt_families`` applies it, so that the fitted
posterior's ``mean()``, ``variance()`` and ``sample()`` are those of ``z``, not ``zeta``.

The ELBO on the original space is (their Eq. 7)::

    L(mu, sigma) = E_{N(zeta; mu, sigma)}[ log p(x, T^{-1}(zeta)) + log |det J_{T^{-1}}(zeta)| ]
                   + H[N(mu, sigma)]

and its gradient is the standard reparameterization gradient with ``zeta = mu + sigma eps``,
``eps ~ N(0, 1)`` (their Eqs. 8-9), one draw per gradient by default. The Gaussian entropy
``sum_i (1/2 + log sigma_i + log(2 pi) / 2)`` is analytic. In terms of the families'
``log_abs_det_jacobian(eps) = log |dz / d eps| = log sigma + log |det J_{T^{-1}}(zeta)|``, one
draw of the ELBO is ``f(z) + log_abs_det_jacobian(eps) + n (1 + log 2 pi) / 2``. Its
expectation is ``E[f] + H[q(z)]`` with ``H[q(z)]`` the entropy of ``z`` on the original space:
for the log-normal this equals :meth:`grepvi.LogNormal.entropy` exactly
(``E[zeta] = mu``), so ADVI, G-REP and BBVI all climb the same objective and ELBOs compare
directly.

The ELBO reported per iteration averages ``num_elbo_samples`` (default 20, as in Ruiz et al.
2016, Section 5 "Evaluation") fresh draws, independent of the gradient draws.

References:
  A. Kucukelbir, D. Tran, R. Ranganath, A. Gelman and D. M. Blei, "Automatic differentiation
  variational inference", JMLR 18(14), 2017.
"""

import math

import jax
import jax.numpy as jnp

from grepvi.errors import ConfigError
from grepvi.estimators.base import (
    EstimateInfo,
    Estimator,
    register_estimator,
    sample_standardized,
    transform_all,
)
from grepvi.estimators.grep import multi_sample
from grepvi.families.base import Family
from grepvi.families.logitnormal import LogitNormal
from grepvi.families.lognormal import LogNormal
from grepvi.families.normal import Normal
from grepvi.families.simplex_normal import SimplexNormal
from grepvi.numerics import softplus
from grepvi.validation import positive_int

__all__ = ["advi", "advi_family", "advi_objective", "ADVI_FAMILIES"]

_HALF_LOG_2PI_E = 0.5 * (1.0 + math.log(2.0 * math.pi))

# Support of the user's family -> ADVI's Gaussian on the unconstrained space, seen on the
# original space.
ADVI_FAMILIES = {
    "positive": LogNormal,
    "unit_interval": LogitNormal,
    "simplex": SimplexNormal,
    "real": Normal,
}


def advi_family(family: Family) -> Family:
    """ADVI's family for a latent that ``family`` describes (same shape and support).

    Initialized as Stan does (``mu = 0``, ``sigma = 1``), keeping ``init_noise`` (the jitter
    that breaks symmetry in factor models) when ``family`` has one.
    """
    from grepvi.families.transformed import Affine, TransformedNormal

    if isinstance(family, tuple(ADVI_FAMILIES.values()) + (TransformedNormal,)):
        return family  # (a TransformedNormal is ADVI's family for its support already)
    if isinstance(family, Affine):  # ADVI's family of the base, moved by the same affine map
        return Affine(base=advi_family(family.base), loc=family.loc, scale=family.scale)
    if family.support not in ADVI_FAMILIES:
        raise ConfigError(
            f"advi: {type(family).__name__} has support {family.support!r}; ADVI knows "
            f"{sorted(ADVI_FAMILIES)}"
        )
    return ADVI_FAMILIES[family.support](
        shape=family.shape, init_noise=float(getattr(family, "init_noise", 0.0))
    )


def advi_objective(params, eps, target):
    """One draw of ADVI's ELBO, ``f(z) + log |dz/d eps| + H[N(0, 1)] per dimension``."""
    families = target.families
    latents = transform_all(params, eps, families, target.log_space)
    value = target.logdensity_fn(latents)
    for name, family in families.items():
        value = value + jnp.sum(family.log_abs_det_jacobian(params[name], eps[name]))
        value = value + _HALF_LOG_2PI_E * eps[name].size
    return value


def sticking_the_landing(params, eps, target):
    """``advi_objective`` with the same value whose gradient drops the score of ``q``.

    Roeder, Wu & Duvenaud (2017): with ``zeta = mu + sigma eps``, the ELBO draw
    ``f(z) + log|dz/dzeta| - log N(zeta; mu, sigma)`` is differentiated through ``zeta`` only
    (``mu``, ``sigma`` stopped inside the density). The dropped term, ``grad_v log q``, has
    mean zero: the estimate stays unbiased, and where ``q`` equals the posterior
    (``f(z) - log q(z)`` constant) every draw's gradient is exactly zero at the optimum.
    """
    value = advi_objective(params, eps, target)
    for name in target.families:
        loc, raw_scale = params[name]["loc"], params[name]["scale"]
        scale = softplus(raw_scale)
        zeta = loc + scale * eps[name]
        fixed_loc, fixed_scale = jax.lax.stop_gradient(loc), jax.lax.stop_gradient(scale)
        extra = (
            -jnp.log(scale)
            + jnp.log(fixed_scale)
            + 0.5 * ((zeta - fixed_loc) / fixed_scale) ** 2
            - 0.5 * eps[name] ** 2
        )
        value = value + jnp.sum(extra)
    return value


_sticking_the_landing = sticking_the_landing


@register_estimator("advi")
def advi(
    num_samples: int = 1,
    num_elbo_samples: int = 20,
    compute_variance: bool = False,
    sticking_the_landing: bool = False,
) -> Estimator:
    """ADVI (Kucukelbir et al. 2017): reparameterization of a Gaussian on the unconstrained space.

    Args:
      num_samples: draws averaged per gradient (paper: 1).
      num_elbo_samples: fresh draws for the reported ELBO (paper: 20); ``0`` reports the ELBO
        of the gradient draws instead.
      compute_variance: report ``gradient_variance`` (per-draw, needs ``num_samples > 1``).
      sticking_the_landing: the path-derivative form of Roeder et al. (2017)
        (:func:`sticking_the_landing`): unbiased, and noise-free at an optimum where the
        posterior is in the family.
    """
    num_samples = positive_int(num_samples, "num_samples")
    stl = bool(sticking_the_landing)
    if isinstance(num_elbo_samples, bool) or int(num_elbo_samples) != num_elbo_samples:
        raise ConfigError(f"num_elbo_samples must be an integer, got {num_elbo_samples!r}")
    num_elbo_samples = int(num_elbo_samples)
    if num_elbo_samples < 0:
        raise ConfigError(f"num_elbo_samples must be >= 0, got {num_elbo_samples}")

    def single(rng_key, params, target):
        eps = sample_standardized(rng_key, params, target.families)
        objective = _sticking_the_landing if stl else advi_objective
        elbo, grad = jax.value_and_grad(objective)(params, eps, target)
        return grad, EstimateInfo(elbo=elbo, extras={})

    averaged = multi_sample(single, num_samples, compute_variance)

    def estimate(rng_key, params, target):
        key_gradient, key_elbo = jax.random.split(rng_key)
        grad, info = averaged(key_gradient, params, target)
        if num_elbo_samples:
            eps = sample_standardized(key_elbo, params, target.families, (num_elbo_samples,))
            draws = jax.vmap(advi_objective, in_axes=(None, 0, None))(
                jax.lax.stop_gradient(params), eps, target
            )
            info = info._replace(elbo=jnp.mean(draws))
        return grad, info

    return Estimator(
        name="advi",
        estimate=estimate,
        adapt_families=lambda families: {name: advi_family(family) for name, family in families.items()},
        options={
            "num_samples": num_samples,
            "num_elbo_samples": num_elbo_samples,
            "compute_variance": compute_variance,
            "sticking_the_landing": stl,
        },
    )

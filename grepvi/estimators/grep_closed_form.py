"""G-REP from the closed forms of the paper's supplement (gamma, beta, log-normal).

The same estimator as :mod:`grepvi.estimators.grep`, written out by hand; the tests check
that both agree draw by draw. With ``f`` the (local) log joint, ``f' = d f / d z``; the code
takes ``f' z`` (``f' z (1 - z)`` for the beta) as the derivative of ``f`` in ``log z``
(``logit z``), which a log-space target (``Target.log_space``) gives exactly, also where ``z``
itself rounds to 0 or 1:

Gamma, shape ``a``, rate ``b`` (supplement B), ``k = eps psi_2(a) / (2 sqrt psi_1(a)) + psi_1(a)``::

    g_rep_a  = f' z k                    g_rep_b  = -f' z / b
    g_corr_a = f ((a - 1 - b z) k + log b - psi(a) + log z + k + psi_2(a) / (2 psi_1(a)))
    g_corr_b = 0

Beta with the zero-correction ``sigma`` (supplement C), ``w = logit z - psi(a) + psi(b)``::

    g_a = f' z (1 - z) (psi_1(a) + w dphi/da)      g_b = f' z (1 - z) (-psi_1(b) + w dphi/db)

Log-normal (Section 3.1): ``g_mu = f' z``, ``g_sigma = f' z eps``.

The entropy gradient is analytic; the chain rule to the unconstrained parameters goes
through ``jax.vjp`` of ``natural_params``.
"""

import jax
import jax.numpy as jnp

from grepvi import numerics
from grepvi.errors import ConfigError
from grepvi.estimators.base import (
    EstimateInfo,
    Estimator,
    register_estimator,
    sample_standardized,
    total_entropy,
    transform_all,
)
from grepvi.estimators.grep import multi_sample
from grepvi.families.beta import Beta, zero_correction_dphi
from grepvi.families.gamma import Gamma
from grepvi.families.lognormal import LogNormal
from grepvi.target import local_log_joints
from grepvi.validation import positive_int

__all__ = ["grep_closed_form"]


def _gamma_natural_gradient(family, params, eps, f_log, f_local):
    # f_log = d f / d log z = z f'(z)
    natural = family.natural_params(params)
    a, b = natural["concentration"], natural["rate"]
    trigamma, tetragamma = numerics.trigamma(a), numerics.tetragamma(a)
    sqrt_trigamma = jnp.sqrt(trigamma)
    log_z = family.log_transform(params, eps)
    z = jnp.exp(log_z)  # only in b z of g_corr, where an underflow to 0 is the right value
    k = eps * tetragamma / (2.0 * sqrt_trigamma) + trigamma
    g_rep_a = f_log * k
    g_rep_b = -f_log / b
    score_a = jnp.log(b) - numerics.digamma(a) + log_z
    u_a = k + tetragamma / (2.0 * trigamma)
    g_corr_a = f_local * ((a - 1.0 - b * z) * k + score_a + u_a)
    entropy_a = 1.0 + (1.0 - a) * trigamma
    entropy_b = -1.0 / b
    return {"concentration": g_rep_a + g_corr_a + entropy_a, "rate": g_rep_b + entropy_b}


def _beta_natural_gradient(family, params, eps, f_log, f_local):
    # f_log = d f / d logit z = z (1 - z) f'(z)
    del f_local  # g_corr = 0 by the choice of sigma.
    a, b = family._ab(params)
    w = eps
    logit = w + numerics.digamma(a) - numerics.digamma(b)
    dphi_da, dphi_db = zero_correction_dphi(a, b, w, logit)
    scale = f_log
    digamma_total = numerics.digamma(a + b)
    entropy_a = -(a - 1.0) * numerics.trigamma(a) + (a + b - 2.0) * numerics.trigamma(a + b)
    entropy_b = -(b - 1.0) * numerics.trigamma(b) + (a + b - 2.0) * numerics.trigamma(a + b)
    del digamma_total
    return {
        "concentration1": scale * (numerics.trigamma(a) + w * dphi_da) + entropy_a,
        "concentration0": scale * (-numerics.trigamma(b) + w * dphi_db) + entropy_b,
    }


def _lognormal_natural_gradient(family, params, eps, f_log, f_local):
    # f_log = d f / d log z = z f'(z)
    del f_local
    scale = numerics.softplus(params["scale"])
    return {"loc": f_log + 1.0, "scale": f_log * eps + 1.0 / scale}


def _value_jacobian(family, z):
    """``dz / du`` for ``u`` the log space of the support: ``z`` or ``z (1 - z)``."""
    return z * (1.0 - z) if family.support == "unit_interval" else z


def _natural_gradient(family, params, eps, f_prime, f_local):
    if isinstance(family, Gamma):
        return _gamma_natural_gradient(family, params, eps, f_prime, f_local)
    if isinstance(family, Beta) and family.standardization == "zero-correction":
        return _beta_natural_gradient(family, params, eps, f_prime, f_local)
    if isinstance(family, LogNormal):
        return _lognormal_natural_gradient(family, params, eps, f_prime, f_local)
    raise ConfigError(
        f"grep-closed-form: no closed form for {type(family).__name__}"
        + (f"(standardization={family.standardization!r})" if hasattr(family, "standardization") else "")
        + "; use estimator='grep' (autodiff), which handles every family"
    )


@register_estimator("grep-closed-form")
def grep_closed_form(num_samples: int = 1, compute_variance: bool = False) -> Estimator:
    """G-REP from the supplement's formulas (gamma; beta with zero-correction; log-normal)."""
    num_samples = positive_int(num_samples, "num_samples")

    def single(rng_key, params, target):
        families = target.families
        eps = sample_standardized(rng_key, params, families)
        # The formulas need d f / d u in the log space of each support (u = log z, logit z):
        # a log-space target gives it directly; a value-space one gives f'(z), times dz/du.
        latents = transform_all(params, eps, families, target.log_space)
        log_joint, f_log = jax.value_and_grad(target.logdensity_fn)(latents)
        if not target.log_space:
            f_log = {
                name: f_log[name] * _value_jacobian(family, latents[name])
                for name, family in families.items()
            }
        local = local_log_joints(target, latents)
        grad = {}
        for name, family in families.items():
            natural_grad = _natural_gradient(family, params[name], eps[name], f_log[name], local[name])
            if isinstance(family, Gamma):
                _, pullback = jax.vjp(family.natural_params, params[name])
            elif isinstance(family, Beta):
                _, pullback = jax.vjp(family.natural_params, params[name])
            else:
                _, pullback = jax.vjp(
                    lambda p: {"loc": p["loc"], "scale": numerics.softplus(p["scale"])}, params[name]
                )
            (grad[name],) = pullback(natural_grad)
        elbo = log_joint + total_entropy(params, families)
        return grad, EstimateInfo(elbo=elbo, extras={})

    return Estimator(
        name="grep-closed-form",
        estimate=multi_sample(single, num_samples, compute_variance),
        options={"num_samples": num_samples, "compute_variance": compute_variance},
    )

"""Small numerical helpers shared by the families and estimators.

Positive parameters are optimized through the unconstrained map of the paper (Section 5,
"Experimental setup"): ``v' = log(exp(v) - 1)``, i.e. ``v = softplus(v')``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import special

__all__ = [
    "softplus",
    "inverse_softplus",
    "digamma",
    "trigamma",
    "tetragamma",
    "log_tiny",
    "log_huge",
    "safe_exp",
]


def softplus(x):
    """``log(1 + exp(x))``, the map from unconstrained to positive parameters."""
    return jax.nn.softplus(x)


def inverse_softplus(y):
    """``log(exp(y) - 1)``, stable for small and large ``y``."""
    y = jnp.asarray(y)
    return jnp.where(y > 20.0, y, jnp.log(jnp.expm1(jnp.minimum(y, 20.0))))


def digamma(x):
    """psi(x) = d/dx log Gamma(x)."""
    return special.digamma(x)


def trigamma(x):
    """psi_1(x), the first derivative of the digamma function."""
    return special.polygamma(1, x)


def tetragamma(x):
    """psi_2(x), the second derivative of the digamma function."""
    return special.polygamma(2, x)


def log_tiny(dtype):
    """Log of the smallest positive normal number of ``dtype`` (about -87.3 in float32)."""
    return float(np.log(np.finfo(dtype).tiny))


def log_huge(dtype):
    """Log of a large but safe number of ``dtype`` (max / 1e4, so sums stay finite)."""
    return float(np.log(np.finfo(dtype).max)) - 10.0


def safe_exp(log_value):
    """``exp`` of a log-space value, clamped to the normal range of its dtype.

    Gamma(0.1) variates underflow float32 (about 1 in 6,000 of them are below 1e-38). The
    families keep ``log z`` exact and hand the model ``z = safe_exp(log z)``, which never is 0
    or inf, so ``log z`` recomputed by a model stays finite. The clamp's gradient is zero
    outside the range; such draws are rare and documented in the families.
    """
    dtype = jnp.result_type(log_value)
    return jnp.exp(jnp.clip(log_value, log_tiny(dtype), log_huge(dtype)))

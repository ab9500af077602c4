"""A value-space model's gradient where float32 overflows (issue 23): recomputed in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi.interop.widened_gradient import float64_where_float32_overflows

numpyro = pytest.importorskip("numpyro")
dist = pytest.importorskip("numpyro.distributions")

from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

SHAPE = 0.1


def floored_mean_model():
    """``z ~ Gamma(a, a / m)`` with ``m`` floored as a user floors it (the DEF's layer)."""
    m = numpyro.sample("m", dist.Gamma(1.0, 1.0))
    mean = jnp.maximum(m, jnp.finfo(jnp.float32).tiny)
    numpyro.sample("z", dist.Gamma(SHAPE, SHAPE / mean))


def exact_gradient(m, z):
    """d/d(log m, log z) of ``log Gamma(m; 1, 1) + log Gamma(z; a, a / m)`` (densities of the
    values, as the adapter's log joint): ``(-m - a + a z / m, (a - 1) - a z / m)``."""
    return {"m": -m - SHAPE + SHAPE * z / m, "z": (SHAPE - 1.0) - SHAPE * z / m}


def gradients(m, z):
    adapted = from_numpyro(floored_mean_model)
    point = {"m": jnp.log(jnp.float32(m)), "z": jnp.log(jnp.float32(z))}
    plain = jax.grad(adapted.joint.logdensity_fn)(point, adapted.data)
    widened = jax.jit(jax.grad(float64_where_float32_overflows(adapted.joint.logdensity_fn)))(
        point, adapted.data
    )
    return plain, widened


def test_gradient_where_float32_overflows_is_float64s():
    # mean = 1e-25: the chain rule's a / mean^2 = 1e49 overflows float32, the gradient is 0.2
    plain, widened = gradients(1e-25, 3e-25)
    assert not np.isfinite(float(plain["m"])), "the case must overflow in float32"
    exact = exact_gradient(1e-25, 3e-25)
    for name in ("m", "z"):
        np.testing.assert_allclose(float(widened[name]), exact[name], rtol=1e-5, err_msg=name)


def test_gradient_where_float32_is_finite_is_unchanged():
    plain, widened = gradients(0.5, 0.2)
    exact = exact_gradient(0.5, 0.2)
    for name in ("m", "z"):
        assert float(widened[name]) == float(plain[name])
        np.testing.assert_allclose(float(widened[name]), exact[name], rtol=1e-5, err_msg=name)

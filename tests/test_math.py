"""Polygamma series against scipy, and the softplus maps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from grepvi import numerics

X = np.logspace(-4, 6, 2001)


@pytest.mark.parametrize(
    ("function", "order"), [(numerics.digamma, 0), (numerics.trigamma, 1), (numerics.tetragamma, 2)]
)
def test_polygamma_matches_scipy(function, order):
    expected = special.polygamma(order, X)
    got32 = np.asarray(function(jnp.asarray(X, jnp.float32)), np.float64)
    # float32: relative error a few ulps, except digamma near its root x0 = 1.4616 where
    # absolute error is what float32 can give.
    np.testing.assert_allclose(got32, expected, rtol=2e-5, atol=2e-6)
    with jax.enable_x64(True):
        got64 = np.asarray(function(jnp.asarray(X, jnp.float64)))
    np.testing.assert_allclose(got64, expected, rtol=1e-10, atol=1e-12)


def test_polygamma_derivatives_by_autodiff():
    with jax.enable_x64(True):
        x = jnp.asarray(X[::20], jnp.float64)
        d_digamma = jax.vmap(jax.grad(numerics.digamma))(x)
        d_trigamma = jax.vmap(jax.grad(numerics.trigamma))(x)
    np.testing.assert_allclose(d_digamma, special.polygamma(1, X[::20]), rtol=1e-9)
    np.testing.assert_allclose(d_trigamma, special.polygamma(2, X[::20]), rtol=1e-9)


def test_softplus_round_trip():
    y = jnp.asarray(np.logspace(-6, 3, 50), jnp.float32)
    np.testing.assert_allclose(numerics.softplus(numerics.inverse_softplus(y)), y, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softplus_and_its_derivative_match_the_exact_values(dtype):
    """Value ``log1p(e^x)`` and derivative ``sigmoid(x)`` against float64 numpy (mpmath-level
    forms), across the switch to ``x`` (20 in float32, 40 in float64) and at +-inf."""
    x = np.concatenate([-np.logspace(3, -4, 60), [0.0], np.logspace(-4, 3, 60), [19.9, 20.1, 39.9, 40.1]])
    x = x.astype(dtype).astype(np.float64)  # the inputs as the dtype holds them
    value = np.logaddexp(0.0, x)
    derivative = special.expit(x)
    rtol = 4e-7 if dtype == "float32" else 1e-14
    with jax.enable_x64(dtype == "float64"):
        xs = jnp.asarray(x, dtype)
        got = np.asarray(numerics.softplus(xs), np.float64)
        got_derivative = np.asarray(jax.vmap(jax.grad(numerics.softplus))(xs), np.float64)
        at_inf = numerics.softplus(jnp.asarray([-np.inf, np.inf], dtype))
    finite = value > np.finfo(dtype).tiny  # below, both flush to 0 (float32: x < -87)
    np.testing.assert_allclose(got[finite], value[finite], rtol=rtol)
    np.testing.assert_allclose(got_derivative[finite], derivative[finite], rtol=rtol)
    assert np.all(got[~finite] <= np.finfo(dtype).tiny)
    np.testing.assert_array_equal(np.asarray(at_inf), [0.0, np.inf])


def test_gammaln_and_betaln_match_scipy():
    expected = special.gammaln(X)
    got32 = np.asarray(numerics.gammaln(jnp.asarray(X, jnp.float32)), np.float64)
    np.testing.assert_allclose(got32, expected, rtol=3e-6, atol=3e-6)
    with jax.enable_x64(True):
        got64 = np.asarray(numerics.gammaln(jnp.asarray(X, jnp.float64)))
        b64 = np.asarray(numerics.betaln(jnp.asarray(X, jnp.float64), 0.5))
    np.testing.assert_allclose(got64, expected, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(b64, special.betaln(X, 0.5), rtol=1e-9, atol=1e-10)


def test_betaln_in_float32_keeps_its_digits_at_large_arguments():
    """Where ``log Gamma(a) + log Gamma(b) - log Gamma(a + b)`` cancels (an argument of 1e4:
    terms of 1e5 for a result of 1e1), the value and both partial derivatives keep float32's
    precision: Stirling's series of the difference, digamma differences without cancellation."""
    grid = np.array([1e-3, 0.05, 0.5, 3.0, 7.9, 8.0, 30.0, 1e3, 1e4, 1e5])
    a, b = (m.ravel() for m in np.meshgrid(grid, grid))
    value = np.asarray(numerics.betaln(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)), np.float64)
    expected = special.betaln(a, b)
    assert np.max(np.abs(value - expected) / np.maximum(np.abs(expected), 1.0)) < 2e-6
    partials = jax.vmap(jax.grad(numerics.betaln, argnums=(0, 1)))(
        jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    )
    for got, x in zip(partials, (a, b), strict=True):
        exact = special.digamma(x) - special.digamma(a + b)
        np.testing.assert_allclose(np.asarray(got, np.float64), exact, rtol=1e-4, atol=0)

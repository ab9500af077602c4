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


def test_gammaln_and_betaln_match_scipy():
    expected = special.gammaln(X)
    got32 = np.asarray(numerics.gammaln(jnp.asarray(X, jnp.float32)), np.float64)
    np.testing.assert_allclose(got32, expected, rtol=3e-6, atol=3e-6)
    with jax.enable_x64(True):
        got64 = np.asarray(numerics.gammaln(jnp.asarray(X, jnp.float64)))
        b64 = np.asarray(numerics.betaln(jnp.asarray(X, jnp.float64), 0.5))
    np.testing.assert_allclose(got64, expected, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(b64, special.betaln(X, 0.5), rtol=1e-9, atol=1e-10)

"""The ADVI step-size sequence (paper Eq. 9) against a hand computation."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import grepvi


def _reference(gradients, eta, tau=1.0, gamma=0.1, kappa=1e-16):
    """Eq. 9 by hand: s_1 = g_1^2, s_i = gamma g_i^2 + (1 - gamma) s_{i-1}."""
    updates, s = [], None
    for i, g in enumerate(gradients, start=1):
        s = g**2 if s is None else gamma * g**2 + (1 - gamma) * s
        rho = eta * i ** (-0.5 + kappa) / (tau + np.sqrt(s))
        updates.append(rho * g)
    return np.array(updates)


def test_advi_stepsize_matches_hand_computed_sequence():
    gradients = np.array([[2.0, -0.5], [1.0, 0.25], [-3.0, 4.0], [0.5, 0.0]])
    optimizer = grepvi.advi_stepsize(learning_rate=0.5)
    params = {"v": jnp.zeros(2)}
    state = optimizer.init(params)
    got = []
    for g in gradients:
        # grepvi feeds optax the gradient of -ELBO; the update ascends the ELBO.
        updates, state = optimizer.update({"v": -jnp.asarray(g)}, state, params)
        got.append(np.asarray(updates["v"]))
    np.testing.assert_allclose(np.array(got), _reference(gradients, 0.5), rtol=1e-6)
    # First two updates written out: 0.5 * 2 / (1 + 2) and then s = 0.1 + 0.9 * 4 = 3.7.
    assert got[0][0] == pytest.approx(1.0 / 3.0, rel=1e-6)
    assert got[1][0] == pytest.approx(0.5 * 2**-0.5 * 1.0 / (1.0 + np.sqrt(3.7)), rel=1e-6)


def test_scale_by_advi_stepsize_options_change_the_sequence():
    gradients = np.array([[1.0], [2.0], [0.5]])
    transform = optax.chain(grepvi.scale_by_advi_stepsize(tau=0.5, gamma=0.3, kappa=0.1), optax.scale(1.0))
    params = {"v": jnp.zeros(1)}
    state = transform.init(params)
    got = []
    for g in gradients:
        updates, state = transform.update({"v": jnp.asarray(g)}, state)
        got.append(np.asarray(updates["v"]))
    expected = _reference(gradients, 1.0, tau=0.5, gamma=0.3, kappa=0.1)
    np.testing.assert_allclose(np.array(got), expected, rtol=1e-5)

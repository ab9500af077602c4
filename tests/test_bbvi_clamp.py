"""BBVI on a value-space model sees the draws below the families' clamp (``z < 1e-30``).

A value-space model is handed ``z`` clamped at ``1e-30`` (float32), so at a gamma shape of
0.1 (0.1% of the draws below the clamp) its value there is the value at the clamp. The
score-function gradient weights each draw's score by that value: without more it is the exact
gradient of the clamped model's ELBO, whose optimum lies 4.6% off in the variance
(``grepvi.estimators.bbvi._extended_below_clamp``). BBVI now extends the value linearly in
``log z`` beyond the clamp, which is exact for the model below (``c log z - b z``): its
estimate on the value-space model equals, draw for draw, its estimate on the same model
written in log space.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi import testing
from grepvi.families.base import beyond_clamp
from grepvi.target import Target

SHAPE, RATE = 0.1, 4.0  # the posterior of a Gamma(0.1, 1) rate after three zero counts


def _targets():
    value = testing.gamma_poisson(counts=(0.0, 0.0, 0.0), prior_shape=0.1, prior_rate=1.0, shape=(3,))
    logged = testing.gamma_poisson(
        counts=(0.0, 0.0, 0.0), prior_shape=0.1, prior_rate=1.0, shape=(3,), log_space=True
    )
    families = value.families
    return (
        Target(value.logdensity_fn, families, value.local_logdensity_fn),
        Target(logged.logdensity_fn, families, logged.local_logdensity_fn, log_space=True),
        families,
    )


def _params(family):
    return {
        "concentration": grepvi.numerics.inverse_softplus(jnp.full((3,), SHAPE) - family.min_concentration),
        "mean": grepvi.numerics.inverse_softplus(jnp.full((3,), SHAPE / RATE) - family.min_mean),
    }


def test_value_space_estimate_equals_the_log_space_one_where_draws_are_clamped():
    value_target, log_target, families = _targets()
    params = {"rate": _params(families["rate"])}
    estimator = grepvi.get_estimator("bbvi", num_samples=4000, num_control_samples=30)
    clamped = 0
    value_estimate = jax.jit(lambda k, p: estimator.estimate(k, p, value_target))  # compiled once each
    log_estimate = jax.jit(lambda k, p: estimator.estimate(k, p, log_target))
    for seed in range(3):
        key = jax.random.key(seed)
        value_grad, value_info = value_estimate(key, params)
        log_grad, log_info = log_estimate(key, params)
        for leaf_value, leaf_log in zip(
            jax.tree_util.tree_leaves(value_grad), jax.tree_util.tree_leaves(log_grad), strict=True
        ):
            np.testing.assert_allclose(np.asarray(leaf_value), np.asarray(leaf_log), rtol=2e-4, atol=2e-3)
        np.testing.assert_allclose(float(value_info.elbo), float(log_info.elbo), rtol=1e-5)
        draws = families["rate"].sample_log_space(params["rate"], jax.random.split(key)[0], (4000,))
        clamped += int(jnp.sum(beyond_clamp(draws, "positive") != 0))
    assert clamped > 0, "the check needs draws below the clamp"


def test_without_the_extension_the_value_space_estimate_differs():
    """The check above can fail: the value-space model's log joint at the clamped draws alone
    (what BBVI weighted the scores by before) gives another gradient, by many times the
    tolerance above."""
    value_target, log_target, families = _targets()
    params = {"rate": _params(families["rate"])}
    draws = families["rate"].sample_log_space(params["rate"], jax.random.key(0), (20_000,))
    below = beyond_clamp(draws, "positive")
    assert int(jnp.sum(below != 0)) > 0
    z = grepvi.numerics.safe_exp(draws)
    clamped_values = jax.vmap(lambda v: value_target.local_logdensity_fn({"rate": v})["rate"])(z)
    exact_values = jax.vmap(lambda u: log_target.local_logdensity_fn({"rate": u})["rate"])(draws)
    gap = np.asarray(exact_values - clamped_values)
    # below the clamp the clamped value misses (shape - 1) log(z / 1e-30): several nats a draw
    assert np.max(np.abs(gap[np.asarray(below) != 0])) > 1.0
    np.testing.assert_allclose(gap[np.asarray(below) == 0], 0.0, atol=1e-3)


@jax.custom_vjp
def _log(z):
    return jnp.log(z)


_log.defvjp(lambda z: (jnp.log(z), z), lambda z, g: (g / z,))


@pytest.mark.slow  # 20 s on CI
def test_a_model_without_forward_mode_is_extended_in_reverse_mode():
    """A value-space model with a ``custom_vjp`` function (no ``jvp``; the DEF's
    ``log_matmul_exp`` is one) gets the extension from one gradient of its log joint: here,
    where each local log joint reads its own element only, the same estimate as in log
    space, for the Rao-Blackwellized and the whole-joint weights."""
    value_target, log_target, families = _targets()

    def local(z):
        return {"rate": (0.1 - 1.0) * _log(z["rate"]) - 4.0 * z["rate"]}

    custom = Target(lambda z: jnp.sum(local(z)["rate"]), families, local)
    params = {"rate": _params(families["rate"])}
    for rao_blackwellize in (True, False):
        estimator = grepvi.get_estimator(
            "bbvi", num_samples=4000, num_control_samples=30, rao_blackwellize=rao_blackwellize
        )
        key = jax.random.key(7)
        custom_grad, _ = jax.jit(lambda k, p, e=estimator: e.estimate(k, p, custom))(key, params)
        log_grad, _ = jax.jit(lambda k, p, e=estimator: e.estimate(k, p, log_target))(key, params)
        for leaf_custom, leaf_log in zip(
            jax.tree_util.tree_leaves(custom_grad), jax.tree_util.tree_leaves(log_grad), strict=True
        ):
            np.testing.assert_allclose(np.asarray(leaf_custom), np.asarray(leaf_log), rtol=2e-4, atol=2e-3)

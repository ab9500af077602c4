"""``Family.log_prob_log_space``: ``log q(z)`` from ``z`` in the log space of its support.

BBVI takes its scores there (a gamma draw of shape 0.1 falls below float32's clamp of 1e-30
once in a thousand draws; the score at the clamped ``z`` biased BBVI's gradient at the exact
optimum of a gamma-Poisson by 10 standard errors).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import grepvi
from grepvi.families.base import to_log_space

FAMILIES = [
    grepvi.Gamma(shape=(3,)),
    grepvi.LogNormal(shape=(3,)),
    grepvi.Beta(shape=(3,)),
    grepvi.LogitNormal(shape=(3,)),
    grepvi.Dirichlet(shape=(2, 3)),
    grepvi.Normal(shape=(3,)),
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: type(f).__name__)
def test_agrees_with_log_prob_where_z_is_representable(family):
    params = family.init_params(jax.random.key(0))
    params = jax.tree_util.tree_map(lambda p: p + 0.3, params)
    z = family.sample(params, jax.random.key(1), (5,))
    u = to_log_space(z, family.support)
    np.testing.assert_allclose(
        np.asarray(family.log_prob_log_space(params, u)),
        np.asarray(family.log_prob(params, z)),
        rtol=2e-5,
        atol=2e-5,
    )


def test_gamma_score_is_exact_below_the_clamp():
    """At ``log z = -200`` (``z`` is 0 in float32) the score is the closed form; through the
    clamped ``z`` (``log z = -69``) it is off by 131 sigmoid(v) in the shape's component."""
    family = grepvi.Gamma()
    params = family.init_params()
    u = jnp.float32(-200.0)
    grad = jax.grad(lambda p: family.log_prob_log_space(p, u))(params)
    a = float(family.natural_params(params)["concentration"])
    m = float(family.mean(params))
    sigmoid = lambda v: 1.0 / (1.0 + np.exp(-float(v)))  # noqa: E731
    expected_concentration = sigmoid(params["concentration"]) * (np.log(a / m) + 1 - special.digamma(a) - 200)
    expected_mean = sigmoid(params["mean"]) * (-a / m)
    np.testing.assert_allclose(float(grad["concentration"]), expected_concentration, rtol=1e-5)
    np.testing.assert_allclose(float(grad["mean"]), expected_mean, rtol=1e-5)
    clamped = jax.grad(lambda p: family.log_prob(p, grepvi.numerics.safe_exp(u)))(params)
    assert abs(float(clamped["concentration"]) - expected_concentration) > 50  # 131 sigmoid(v) = 83

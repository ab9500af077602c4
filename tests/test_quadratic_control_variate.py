"""The quadratic control variate (``grepvi.estimators.quadratic_control_variate``).

* Unbiased whatever its running expansion holds: the mean of 100,000 one-draw gradients of the
  carried estimate, with an arbitrary expansion (random gradient and Hessian), equals
  ``jax.grad`` of the closed-form ELBO within 5 Monte Carlo standard errors on conjugate
  models (gamma-Poisson at shape 0.1, beta-Bernoulli, log-normal-normal) and on a Gaussian
  ridge whose latents are coupled. The same check rejects the estimate without the expansion's
  expected gradient (the power of the check).
* On the ridge, the regression recovers the log joint's Hessian and the location gradients'
  per-draw variance falls below 1% of the default estimate's (path derivative and running
  baseline): the coupling a mean-field ``q`` cannot hold is what remained in it.
* The families' input moments against 200,000 draws; a default-procedure fit with the
  expansion lands on the ridge's exact mean-field optimum; the default estimator has none.
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi import numerics, testing
from grepvi.errors import ConfigError
from grepvi.estimators import get_estimator
from grepvi.estimators import quadratic_control_variate as qcv
from grepvi.estimators.base import sample_standardized, transform_all
from grepvi.families import Beta, Gamma, LogitNormal, LogNormal, Normal
from grepvi.families.transformed import Affine
from grepvi.target import Target

grep_module = importlib.import_module("grepvi.estimators.grep")

NUM_DRAWS = 100_000
MAX_STANDARD_ERRORS = 5.0

# the ridge: a, b ~ N(0, 10^2), y_i ~ N(a + b, 1): a + b is pinned by the data, a - b only by
# the prior; the mean-field optimum has s_a^2 = 1 / Lambda_aa and means at the posterior's
RIDGE_Y = np.asarray([1.3, 0.7, 1.1, 0.9, 1.4, 0.6, 1.2, 0.8], np.float32)
PRIOR_SCALE = 10.0


def _ridge_logdensity(z):
    a, b = z["a"], z["b"]
    prior = -0.5 * (a**2 + b**2) / PRIOR_SCALE**2
    return prior - 0.5 * jnp.sum((jnp.asarray(RIDGE_Y) - a - b) ** 2)


def _ridge_exact_elbo(params):
    family = Normal()
    (ma, sa), (mb, sb) = [(p["loc"], numerics.softplus(p["scale"])) for p in (params["a"], params["b"])]
    prior = -0.5 * (ma**2 + sa**2 + mb**2 + sb**2) / PRIOR_SCALE**2
    y = jnp.asarray(RIDGE_Y)
    likelihood = -0.5 * jnp.sum((y - ma - mb) ** 2 + sa**2 + sb**2)
    return prior + likelihood + family.entropy(params["a"]) + family.entropy(params["b"])


def _ridge_precision():
    n, p = RIDGE_Y.size, 1.0 / PRIOR_SCALE**2
    return np.asarray([[n + p, n], [n, n + p]])


def _ridge():
    target = Target(_ridge_logdensity, {"a": Normal(), "b": Normal()}, log_space=True)
    params = {
        "a": {"loc": jnp.float32(0.9), "scale": numerics.inverse_softplus(jnp.float32(0.3))},
        "b": {"loc": jnp.float32(-0.2), "scale": numerics.inverse_softplus(jnp.float32(0.3))},
    }
    return target, params


def _flat(tree):
    return jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(tree)])


def _conjugate(name):
    inverse = numerics.inverse_softplus
    if name == "gamma-poisson":
        model = testing.gamma_poisson(shape=(3,), log_space=True)
        params = {
            "rate": {
                "concentration": inverse(jnp.asarray([0.1, 0.1, 0.1], jnp.float32)),
                "mean": inverse(jnp.asarray([0.5, 4.0, 1.0], jnp.float32)),
            }
        }
    elif name == "beta-bernoulli":
        model = testing.beta_bernoulli(shape=(3,), log_space=True)
        params = {
            "prob": {
                "concentration1": inverse(jnp.asarray([0.3, 2.0, 5.0], jnp.float32)),
                "concentration0": inverse(jnp.asarray([1.0, 0.7, 3.0], jnp.float32)),
            }
        }
    else:
        model = testing.lognormal_normal(shape=(3,), log_space=True)
        params = {
            "scale": {
                "loc": jnp.asarray([0.1, -0.4, 0.6], jnp.float32),
                "scale": inverse(jnp.asarray([0.2, 0.5, 1.0], jnp.float32)),
            }
        }
    target = Target(model.logdensity_fn, model.families, model.local_logdensity_fn, log_space=True)
    return target, params, model.exact_elbo


def _arbitrary_state(estimator, target, seed=0):
    """The carried state with an arbitrary expansion: a random gradient and symmetric Hessian of
    order 1-10, as if fitted long ago to another ``q``."""
    baseline, running = estimator.carried.init(target.families, target.log_space)
    n = running.gradient.size
    key_g, key_h = jax.random.split(jax.random.key(seed))
    gradient = 5.0 * jax.random.normal(key_g, (n,))
    hessian = 3.0 * jax.random.normal(key_h, (n, n))
    return baseline, qcv.RunningExpansion(gradient, hessian, jnp.float32(1.0))


def _carried_draws(estimator, target, params, state, seed=1):
    def one(key):
        grad, _, _ = estimator.carried.estimate(key, params, target, state)
        return _flat(grad)

    keys = jax.random.split(jax.random.key(seed), NUM_DRAWS)
    return np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)


def _standard_errors_off(draws, exact):
    se = draws.std(0, ddof=1) / np.sqrt(draws.shape[0])
    return np.abs(draws.mean(0) - exact) / se


@pytest.mark.parametrize("name", ["gamma-poisson", "beta-bernoulli", "lognormal-normal", "ridge"])
def test_the_estimate_is_unbiased_whatever_the_expansion_holds(name):
    if name == "ridge":
        target, params = _ridge()
        exact_elbo = _ridge_exact_elbo
    else:
        target, params, exact_elbo = _conjugate(name)
    estimator = get_estimator("grep", control_variate="quadratic")
    draws = _carried_draws(estimator, target, params, _arbitrary_state(estimator, target))
    exact = np.asarray(_flat(jax.grad(exact_elbo)(params)), np.float64)
    off = _standard_errors_off(draws, exact)
    assert np.all(off < MAX_STANDARD_ERRORS), (off, draws.mean(0), exact)


def test_the_check_rejects_the_estimate_without_the_expected_gradient(monkeypatch):
    """Without ``grad E_q[f~]`` the estimate is G-REP's of ``f - f~``: biased, by many standard
    errors, which the check above would report."""
    target, params = _ridge()
    estimator = get_estimator("grep", control_variate="quadratic")
    state = _arbitrary_state(estimator, target)
    monkeypatch.setattr(qcv, "expectation", lambda *args: 0.0)
    draws = _carried_draws(estimator, target, params, state)
    exact = np.asarray(_flat(jax.grad(_ridge_exact_elbo)(params)), np.float64)
    assert np.max(_standard_errors_off(draws, exact)) > 20.0


def _warmed(estimator, target, params, steps=200, draws=16):
    """The carried state after ``steps`` steps of ``draws`` draws each at fixed ``params``."""
    carried = grep_module.multi_sample_carried(
        lambda k, p, t, s: estimator.carried.estimate(k, p, t, s), draws, compute_variance=False
    )

    def body(state, key):
        _, _, statistics = carried(key, params, target, state)
        return estimator.carried.advance(state, statistics), None

    keys = jax.random.split(jax.random.key(7), steps)
    return jax.lax.scan(body, estimator.carried.init(target.families, target.log_space), keys)[0]


def test_the_regression_recovers_the_hessian_and_the_coupling_noise_vanishes():
    """The running regression holds about the last 19 steps' slopes (decay 0.9): at 16 draws a
    step its Hessian's sd over seeds was 10% (unbiased: within 2% on average over 20 seeds), at
    256 draws about 2.5%; with it the location gradients' per-draw variance falls below 1% of
    the path derivative's."""
    target, params = _ridge()
    estimator = get_estimator("grep", control_variate="quadratic")
    state = _warmed(estimator, target, params, draws=256)
    expansion = qcv.expansion(state[1], params, target.families, target.log_space)
    np.testing.assert_allclose(np.asarray(expansion.hessian), -_ridge_precision(), rtol=0.1)

    default = get_estimator("grep")
    default_state = default.carried.init(target.families, target.log_space)
    keys = jax.random.split(jax.random.key(3), 4_000)

    def variances(fn):
        grads = jax.jit(jax.vmap(fn))(keys)
        return np.asarray([np.var(np.asarray(grads[n]["loc"]), ddof=1) for n in ("a", "b")])

    plain = variances(lambda k: default.carried.estimate(k, params, target, default_state)[0])
    expanded = variances(lambda k: estimator.carried.estimate(k, params, target, state)[0])
    # measured: 8.0 per draw with the path derivative, ~1e-5 with the expansion
    assert np.all(plain > 1.0), plain
    assert np.all(expanded < 0.01 * plain), (expanded, plain)


def test_a_steps_slope_is_unbiased_from_a_single_draw():
    """A step of one draw adds an unbiased slope ``(y - g) u'`` to the regression, ``g`` the
    running gradient (not the step's own ``y``, whose centring left a one-draw step's slope at
    exactly 0 and an ``n``-draw step's at ``(n - 1) / n`` of it): over 100,000 one-draw steps
    from one state the added slopes average to the ridge's Hessian within 5 Monte Carlo
    standard errors (Stein's identity: the inputs are Gaussian)."""
    target, params = _ridge()
    estimator = get_estimator("grep", control_variate="quadratic")
    state = _arbitrary_state(estimator, target)
    carried = grep_module.multi_sample_carried(
        lambda k, p, t, s: estimator.carried.estimate(k, p, t, s), 1, compute_variance=False
    )

    def slope(key):
        _, _, statistics = carried(key, params, target, state)
        after = qcv.advance(state[1], statistics[1])
        return jnp.ravel((after.hessian - qcv.DECAY * state[1].hessian) / (1.0 - qcv.DECAY))

    keys = jax.random.split(jax.random.key(5), NUM_DRAWS)
    slopes = np.asarray(jax.jit(jax.vmap(slope))(keys), np.float64)
    exact = -_ridge_precision().ravel()
    assert np.all(_standard_errors_off(slopes, exact) < MAX_STANDARD_ERRORS), (slopes.mean(0), exact)
    assert np.all(np.abs(exact) > 10.0 * slopes.std(0, ddof=1) / np.sqrt(NUM_DRAWS))  # 0 would fail


@pytest.mark.parametrize(
    "family, params",
    [
        (Gamma(shape=(2,)), {"concentration": [0.1, 3.0], "mean": [2.0, 0.5]}),
        (Beta(shape=(2,)), {"concentration1": [0.5, 4.0], "concentration0": [2.0, 1.5]}),
        (Normal(shape=(2,)), {"loc": [0.3, -2.0], "scale": [0.5, 2.0]}),
        (LogNormal(shape=(2,)), {"loc": [0.3, -2.0], "scale": [0.5, 2.0]}),
        (LogitNormal(shape=(2,)), {"loc": [0.3, -2.0], "scale": [0.5, 2.0]}),
        (
            Affine(base=Beta(shape=(2,)), loc=0.5, scale=0.5),
            {"concentration1": [0.5, 4.0], "concentration0": [2.0, 1.5]},
        ),
    ],
    ids=["gamma", "beta", "normal", "lognormal", "logitnormal", "affine-beta"],
)
def test_the_input_moments_are_the_draws(family, params):
    params = {
        k: numerics.inverse_softplus(jnp.asarray(v, jnp.float32))
        if k != "loc"
        else jnp.asarray(v, jnp.float32)
        for k, v in params.items()
    }
    assert family.has_input_moments(True)
    eps = sample_standardized(jax.random.key(0), {"x": params}, {"x": family}, (200_000,))
    x = np.asarray(transform_all({"x": params}, eps, {"x": family}, log_space=True)["x"], np.float64)
    mean, variance = (np.asarray(m, np.float64) for m in family.input_moments(params, True))
    se_mean = x.std(0) / np.sqrt(x.shape[0])
    assert np.all(np.abs(x.mean(0) - mean) < 5 * se_mean), (x.mean(0), mean)
    np.testing.assert_allclose(x.var(0), variance, rtol=0.03)


def test_value_space_targets_cover_only_the_real_line():
    families = {"g": Gamma(), "n": Normal(), "l": LogNormal(), "b": Affine(base=Beta(), loc=-1.0, scale=2.0)}
    assert qcv.covered_latents(families, log_space=True) == ("b", "g", "l", "n")
    assert qcv.covered_latents(families, log_space=False) == ("b", "n")


def _estimator_state(result):
    return result.run_state.loop.estimator_state


def test_a_fit_with_the_expansion_lands_on_the_mean_field_optimum_and_the_default_has_none():
    latents = {"a": Normal(), "b": Normal()}
    result = grepvi.fit(
        _ridge_logdensity,
        latents,
        progress=False,
        log_space=True,
        estimator_options={"control_variate": "quadratic"},
    )
    assert result.converged
    state = _estimator_state(result)
    assert isinstance(state, tuple) and isinstance(state[1], qcv.RunningExpansion)
    # the answer: the mean-field optimum (posterior means; variances 1 / Lambda_ii)
    precision = _ridge_precision()
    mean = np.linalg.solve(precision, [RIDGE_Y.sum()] * 2)
    sd = precision[0, 0] ** -0.5
    for i, name in enumerate(("a", "b")):
        posterior = result.posterior[name]
        assert abs(float(posterior.mean()) - mean[i]) < 0.05 * sd, (name, float(posterior.mean()), mean[i])
        assert abs(float(posterior.variance()) ** 0.5 / sd - 1.0) < 0.02

    plain = grepvi.fit(
        _ridge_logdensity, latents, progress=False, log_space=True, num_steps=10, step_size=0.01
    )
    assert isinstance(_estimator_state(plain), grep_module.RunningBaseline)


def test_the_expansion_needs_the_running_state_and_full_batch_steps():
    with pytest.raises(ConfigError, match="control_variate"):
        get_estimator("grep", control_variate="quadratic", baseline="means")
    with pytest.raises(ConfigError, match="control_variate"):
        get_estimator("grep", control_variate="cubic")
    model = testing.gamma_poisson(shape=(3,), log_space=True)
    with pytest.raises(ConfigError, match="full-batch"):
        grepvi.fit(
            model.logdensity_fn,
            model.families,
            progress=False,
            log_space=True,
            estimator_options={"control_variate": "quadratic"},
            parallel=True,
        )


def test_with_no_latent_covered_the_estimate_is_the_default_one():
    """A value-space target's gamma latent has no closed-form input moments: the expansion is
    empty and every draw's gradient is the default estimate's, number for number."""
    model = testing.gamma_poisson(shape=(3,), log_space=False)
    target = Target(model.logdensity_fn, model.families, model.local_logdensity_fn)
    assert qcv.covered_latents(target.families, target.log_space) == ()
    params = {name: family.init_params() for name, family in target.families.items()}
    expanded, default = get_estimator("grep", control_variate="quadratic"), get_estimator("grep")
    state = expanded.carried.init(target.families, target.log_space)
    for seed in range(3):
        key = jax.random.key(seed)
        mine = expanded.carried.estimate(key, params, target, state)[0]
        theirs = default.carried.estimate(key, params, target, state[0])[0]
        for x, y in zip(jax.tree_util.tree_leaves(mine), jax.tree_util.tree_leaves(theirs), strict=True):
            np.testing.assert_array_equal(x, y)

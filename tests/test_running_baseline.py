"""G-REP's running baseline (``grepvi.estimators.grep.RunningBaseline``), carried by the step.

* Unbiased whatever the state holds: the mean of 100,000 one-draw gradients of the carried
  estimate, with a state of arbitrary (large) offsets, equals ``jax.grad`` of the closed-form
  ELBO within 5 Monte Carlo standard errors, on the conjugate gamma-Poisson and beta-Bernoulli
  models at small and large shapes. The same check rejects a baseline that reads the draw
  (the power of the check: a fail, not a pass, is what such a bug gives).
* Lower variance where the means' value is a poor baseline: on a small sparse gamma DEF at
  gamma shape 1 a warmed state cuts the shape gradients' per-draw variance below the means'
  baseline's; at shape 10 the shrunk offset keeps it near the means' (the offset is not known
  better than its noise). (On the one-rate gamma-Poisson at shape 0.1 the two are within
  10%: ``f``'s own spread there, ``psi_1(0.1) ~ 101`` in ``log z``, dwarfs the offset.)
* The average and its shrinkage, exactly; a default fit carries the state in its run state.
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi import numerics, testing
from grepvi.errors import ConfigError
from grepvi.estimators import get_estimator
from grepvi.estimators.base import sample_standardized, transform_all
from grepvi.target import Target

grep_module = importlib.import_module("grepvi.estimators.grep")  # the package exports grep()
RunningBaseline = grep_module.RunningBaseline

NUM_DRAWS = 100_000
MAX_STANDARD_ERRORS = 5.0


def _target(model):
    return Target(model.logdensity_fn, model.families, model.local_logdensity_fn, log_space=model.log_space)


def _gamma_params(shape):
    inverse = numerics.inverse_softplus
    return {
        "rate": {
            "concentration": inverse(shape * jnp.ones(4, jnp.float32)),
            "mean": inverse(jnp.asarray([0.5, 4.0, 1.0, 2.0], jnp.float32)),
        }
    }


def _beta_params(shape):
    inverse = numerics.inverse_softplus
    return {
        "prob": {
            "concentration1": inverse(shape * jnp.asarray([1.0, 2.0, 0.5, 1.5], jnp.float32)),
            "concentration0": inverse(shape * jnp.asarray([2.0, 0.7, 1.0, 3.0], jnp.float32)),
        }
    }


def _flat(tree):
    return jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(tree)])


def _state(values: dict, spread: float = 0.0) -> RunningBaseline:
    """A state whose shrunk offsets are ``values`` (``spread``: the draws' variance it saw)."""
    offset = {name: jnp.asarray(v, jnp.float32) for name, v in values.items()}
    square = {name: v**2 + spread for name, v in offset.items()}
    return RunningBaseline(offset, square)


def _carried_draws(model, params, state, seed=0):
    estimator = get_estimator("grep")
    target = _target(model)

    def one(key):
        grad, _, _ = estimator.carried.estimate(key, params, target, state)
        return _flat(grad)

    keys = jax.random.split(jax.random.key(seed), NUM_DRAWS)
    return np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)


def _standard_errors_off(draws, exact):
    mean = draws.mean(0)
    se = draws.std(0, ddof=1) / np.sqrt(draws.shape[0])
    return np.abs(mean - exact) / se


CASES = [
    ("gamma-poisson", 0.1, {"rate": [40.0, -25.0, 3.0, 100.0]}),
    ("gamma-poisson", 10.0, {"rate": [-7.0, 12.0, 0.5, 30.0]}),
    ("beta-bernoulli", 0.3, {"prob": [5.0, -3.0, 9.0, -1.0]}),
    ("beta-bernoulli", 5.0, {"prob": [-2.0, 4.0, 0.0, 6.0]}),
]


# the small shapes (0.1, 0.3: where the draws clamp) in the fast tier, the large ones in the slow
@pytest.mark.parametrize(
    "name, shape, offsets",
    [pytest.param(*c, marks=pytest.mark.slow) if c[1] >= 5.0 else c for c in CASES],
    ids=[f"{c[0]}-{c[1]}" for c in CASES],
)
def test_the_carried_estimate_is_unbiased_whatever_its_state_holds(name, shape, offsets):
    if name == "gamma-poisson":
        model, params = testing.gamma_poisson(shape=(4,), log_space=True), _gamma_params(shape)
    else:
        model, params = testing.beta_bernoulli(shape=(4,), log_space=True), _beta_params(shape)
    draws = _carried_draws(model, params, _state(offsets))
    exact = np.asarray(_flat(jax.grad(model.exact_elbo)(params)), np.float64)
    off = _standard_errors_off(draws, exact)
    assert np.all(off < MAX_STANDARD_ERRORS), (off, draws.mean(0), exact)


def test_the_check_rejects_a_baseline_that_reads_the_draw():
    """A baseline equal to the draw's own local log joint zeroes ``g_corr``: biased, and the
    check above says so (by many standard errors at a gamma shape of 0.1)."""
    model, params = testing.gamma_poisson(shape=(4,), log_space=True), _gamma_params(0.1)
    target = _target(model)

    def one(key):
        eps = sample_standardized(key, params, target.families)
        latents = transform_all(params, eps, target.families, target.log_space)
        own = target.local_logdensity_fn(latents)  # depends on this draw: not a control variate
        grad, _ = jax.grad(grep_module.grep_surrogate, has_aux=True)(params, eps, target, own)
        return _flat(grad)

    keys = jax.random.split(jax.random.key(0), NUM_DRAWS)
    draws = np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)
    exact = np.asarray(_flat(jax.grad(model.exact_elbo)(params)), np.float64)
    assert np.max(_standard_errors_off(draws, exact)) > 20.0


def _small_def(shape):
    """A sparse gamma DEF on 30 x 40 simulated counts (layers 5 and 3), every ``q`` at gamma
    shape ``shape``, and its target."""
    from grepvi.models import sparse_gamma_def
    from grepvi.target import bind_data

    counts = np.random.default_rng(0).poisson(2.0, size=(30, 40)).astype(np.float32)
    model = sparse_gamma_def(counts, layer_sizes=(5, 3))
    target = bind_data(model.target(), jax.tree_util.tree_map(jnp.asarray, model.data))
    params = {}
    for name, family in target.families.items():
        own = family.init_params(jax.random.key(1))
        own["concentration"] = numerics.inverse_softplus(jnp.full(own["concentration"].shape, shape))
        params[name] = own
    return target, params


def _warmed_state(carried, target, params, steps=300):
    """The state after ``steps`` steps of one draw each at fixed ``params``."""

    def body(state, key):
        _, _, offsets = carried.estimate(key, params, target, state)
        return carried.advance(state, offsets), None

    keys = jax.random.split(jax.random.key(7), steps)
    return jax.lax.scan(body, carried.init(target.families), keys)[0]


def _shape_gradient_variances(estimate, names):
    """Per latent, the summed per-draw variance of its shape gradient over 4,000 draws."""
    keys = jax.random.split(jax.random.key(3), 4_000)
    grads = jax.jit(jax.vmap(estimate))(keys)
    return {name: float(jnp.sum(jnp.var(grads[name]["concentration"], axis=0, ddof=1))) for name in names}


# Both shapes in the slow tier (31-35 s each on CI: three programs of a DEF's estimator); the
# carried estimate's unbiasedness and the default fit's running baseline are tested fast.
@pytest.mark.parametrize(
    "shape", [pytest.param(1.0, marks=pytest.mark.slow), pytest.param(10.0, marks=pytest.mark.slow)]
)
def test_a_warmed_running_baseline_against_the_means_value(shape):
    """On a small sparse gamma DEF, where an element's local log joint sums many likelihood
    terms: at shape 1 a warmed state cuts the shape gradients' variance (measured: 0.74 of the
    means' baseline for ``W0``, 0.49 for ``W1``, 0.72 for ``z1``); at shape 10 the means' value
    is a typical draw's, and the shrunk offset leaves every latent's variance within 10% of it
    (measured 0.93-1.00)."""
    target, params = _small_def(shape)
    estimator = get_estimator("grep")
    state = _warmed_state(estimator.carried, target, params)
    names = sorted(target.families)
    means = _shape_gradient_variances(lambda k: estimator.estimate(k, params, target)[0], names)
    running = _shape_gradient_variances(
        lambda k: estimator.carried.estimate(k, params, target, state)[0], names
    )
    ratio = {name: running[name] / means[name] for name in names}
    if shape < 2:
        assert sum(running.values()) < 0.85 * sum(means.values()), ratio
        assert ratio["W1"] < 0.6, ratio
    else:
        assert all(r < 1.1 for r in ratio.values()), ratio


def test_the_average_and_its_shrinkage():
    families = {"a": testing.gamma_poisson(shape=(3,)).families["rate"]}
    state = grep_module.init_running_baseline(families)
    assert np.all(np.asarray(state.offset["a"]) == 0) and np.all(np.asarray(state.square["a"]) == 0)
    first = grep_module.advance_running_baseline(state, {"a": jnp.asarray([2.0, jnp.nan, -4.0])}, decay=0.5)
    np.testing.assert_allclose(first.offset["a"], [1.0, 0.0, -2.0])  # a non-finite draw: no change
    np.testing.assert_allclose(first.square["a"], [2.0, 0.0, 8.0])
    second = grep_module.advance_running_baseline(first, {"a": jnp.asarray([2.0, 1.0, 0.0])}, decay=0.5)
    np.testing.assert_allclose(second.offset["a"], [1.5, 0.5, -1.0])
    np.testing.assert_allclose(second.square["a"], [3.0, 0.5, 4.0])
    # shrinkage: offset^2 / (offset^2 + (square - offset^2) (1 - d) / (1 + d))
    shrunk = grep_module.running_offsets(second, decay=0.5)["a"]
    for value, offset, square in zip(np.asarray(shrunk), [1.5, 0.5, -1.0], [3.0, 0.5, 4.0], strict=True):
        noise = (square - offset**2) / 3.0
        np.testing.assert_allclose(value, offset * offset**2 / (offset**2 + noise), rtol=1e-6)
    exact = _state({"a": [3.0, -2.0, 0.0]})  # no spread: the offsets themselves
    np.testing.assert_allclose(grep_module.running_offsets(exact)["a"], [3.0, -2.0, 0.0])


def test_the_baseline_options():
    assert get_estimator("grep").carried is not None
    assert get_estimator("grep", baseline=True).options["baseline"] == "running"
    assert get_estimator("grep", baseline="means").carried is None
    assert get_estimator("grep", baseline=False).options["baseline"] == "none"
    with pytest.raises(ConfigError, match="baseline"):
        get_estimator("grep", baseline="median")


def test_a_default_fit_carries_the_running_baseline_in_its_run_state():
    import grepvi

    model = testing.gamma_poisson(shape=(3,))
    result = grepvi.fit(
        model.logdensity_fn,
        model.families,
        local_logdensity_fn=model.local_logdensity_fn,
        progress=False,
    )
    assert result.converged and result.convergence.control_variate == ""
    # a model of at most 8 elements carries the quadratic control variate's regression too
    # (fitting.carrying): at its initial value, for no stage ran with it
    state, regression = result.run_state.loop.estimator_state
    assert isinstance(state, RunningBaseline)
    assert np.all(np.abs(np.asarray(state.offset["rate"])) > 0)
    from grepvi.estimators import quadratic_control_variate

    initial = quadratic_control_variate.init(result.families, False)  # grepvi.fit: value space
    for x, y in zip(jax.tree_util.tree_leaves(regression), jax.tree_util.tree_leaves(initial), strict=True):
        np.testing.assert_array_equal(x, y)

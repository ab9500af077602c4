"""The variance reductions on by default or offered: G-REP's baseline in ``g_corr`` and ADVI's
sticking-the-landing form. Both must stay unbiased (mean of many draws within 5 Monte Carlo
standard errors of the exact gradient) and must lower the per-draw variance where claimed."""

import jax
import jax.numpy as jnp
import numpy as np

import grepvi
from grepvi import numerics, testing
from grepvi.target import Target


def _gamma_params(shape, mean):
    return {"rate": {"concentration": numerics.inverse_softplus(jnp.float32(shape) - 1e-6),
                     "mean": numerics.inverse_softplus(jnp.float32(mean))}}  # fmt: skip


def test_grep_baseline_is_unbiased_and_cuts_the_shape_variance_at_a_large_shape():
    model = testing.gamma_poisson(counts=(30.0, 25.0, 40.0), prior_shape=1.0, prior_rate=1.0)
    params = _gamma_params(60.0, 20.0)  # near, not at, the posterior (96, mean 24)
    with_baseline = testing.check_unbiased(grepvi.get_estimator("grep"), model, params, jax.random.key(0))
    plain = testing.check_unbiased(
        grepvi.get_estimator("grep", baseline=False), model, params, jax.random.key(0)
    )
    assert with_baseline.max_abs_z() < 5.0 and plain.max_abs_z() < 5.0
    # component 0 is the shape's gradient: the baseline removes most of its variance
    assert with_baseline.variance[0] < 0.2 * plain.variance[0], (with_baseline.variance, plain.variance)


def test_advi_sticking_the_landing_is_unbiased_and_exact_at_the_optimum():
    model = testing.lognormal_normal()
    estimator = grepvi.get_estimator("advi", sticking_the_landing=True, num_elbo_samples=0)
    away = {"scale": {"loc": jnp.float32(0.1), "scale": numerics.inverse_softplus(jnp.float32(0.6))}}
    check = testing.check_unbiased(estimator, model, away, jax.random.key(1))
    assert check.max_abs_z() < 5.0
    optimum = {"scale": {k: jnp.float32(v) for k, v in model.posterior["scale"].items()}}
    optimum["scale"]["scale"] = numerics.inverse_softplus(optimum["scale"]["scale"])
    target = Target(model.logdensity_fn, model.families, None)
    keys = jax.random.split(jax.random.key(2), 1000)
    plain = grepvi.get_estimator("advi", num_elbo_samples=0)

    @jax.jit  # one program (eagerly, each primitive compiles on its own)
    def draws(keys, params):
        grads = jax.vmap(lambda k: estimator.estimate(k, params, target)[0])(keys)
        plain_grads = jax.vmap(lambda k: plain.estimate(k, params, target)[0])(keys)
        elbos = (
            estimator.estimate(keys[0], params, target)[1].elbo,
            plain.estimate(keys[0], params, target)[1].elbo,
        )
        return grads, plain_grads, elbos

    grads, plain_grads, (elbo, plain_elbo) = draws(keys, optimum)
    for name in ("loc", "scale"):
        assert float(jnp.max(jnp.abs(grads["scale"][name]))) < 1e-3
        assert float(jnp.std(plain_grads["scale"][name])) > 0.1
    np.testing.assert_allclose(float(elbo), float(plain_elbo), rtol=1e-6)

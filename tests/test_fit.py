"""``grepvi.fit``: recovery of exact posteriors with G-REP, and clear errors on bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import grepvi
from grepvi import testing


def _fit(model, steps=3000, lr=0.5, num_samples=20, estimator="grep", decay=0.001):
    optimizer = optax.adam(optax.exponential_decay(lr, steps, decay))
    return grepvi.fit(
        model.logdensity_fn,
        model.families,
        estimator,
        num_steps=steps,
        optimizer=optimizer,
        num_samples=num_samples,
        local_logdensity_fn=model.local_logdensity_fn,
        progress=False,
    )


@pytest.mark.parametrize(
    "model",
    [
        testing.gamma_poisson(),
        testing.beta_bernoulli(),
        testing.lognormal_normal(),
        testing.dirichlet_multinomial(),
    ],
    ids=lambda m: m.name,
)
def test_grep_fit_recovers_exact_posterior(model):
    """Mean and variance within 2% of the conjugate posterior.

    Adam with a learning rate decaying 1000-fold and 20 draws per step; the final iterate's
    noise is well below 2% (measured: at most 1.3% on the gamma shape).
    """
    # Adam's fixed point moves with the gradient noise (E[g / sqrt(v)] != 0 for skewed
    # noise); the log-normal's scale gradient is noisy enough to shift it by ~2% with 20
    # draws (measured: sigma 0.2372 vs 0.2425), so that model uses 200.
    # The gamma shape sits on a flat ridge of the ELBO and needs the larger final rate.
    result = _fit(
        model,
        num_samples=200 if model.name == "lognormal-normal" else 20,
        decay=0.01 if model.name == "gamma-poisson" else 0.001,
    )
    (name,) = model.families
    posterior = result.posterior[name]
    np.testing.assert_allclose(posterior.mean(), model.posterior_mean[name], rtol=0.02)
    np.testing.assert_allclose(posterior.variance(), model.posterior_variance[name], rtol=0.02)
    assert result.num_skipped_steps == 0
    # The ELBO rises: the last tenth of the trace is above the first 30 steps (the Dirichlet's
    # draws reach its optimum within the first tenth: their path-derivative entropy gradient
    # is zero there).
    trace = result.trace.elbo
    assert np.mean(trace[-300:]) > np.mean(trace[:30])


def test_fit_with_default_advi_stepsize_raises_elbo_and_reports_trace():
    model = testing.gamma_poisson(shape=(4,))
    result = grepvi.fit(model.logdensity_fn, model.families, num_steps=250, step_size=1.0, chunk_size=100)
    assert result.trace.elbo.shape == (250,)
    assert np.all(np.diff(result.trace.wall_time) >= 0)
    assert np.mean(result.trace.elbo[-50:]) > np.mean(result.trace.elbo[:50])
    draws = result.posterior["rate"].sample(jax.random.key(0), 7)
    assert draws.shape == (7, 4)


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_same_seed_same_trace():
    model = testing.beta_bernoulli()
    a = grepvi.fit(model.logdensity_fn, model.families, num_steps=50, seed=3, progress=False)
    b = grepvi.fit(model.logdensity_fn, model.families, num_steps=50, seed=3, progress=False)
    c = grepvi.fit(model.logdensity_fn, model.families, num_steps=50, seed=4, progress=False)
    np.testing.assert_array_equal(a.trace.elbo, b.trace.elbo)
    assert a.convergence == b.convergence
    assert not np.array_equal(a.trace.elbo, c.trace.elbo)


def _poisson_logdensity(counts):
    counts = jnp.asarray(counts)

    def logdensity_fn(z):
        rate = z["rate"]
        return jnp.sum(-0.7 * jnp.log(rate) - rate) + jnp.sum(counts * jnp.log(rate) - rate)

    return logdensity_fn


def test_error_names_latent_when_shapes_do_not_fit():
    logdensity_fn = _poisson_logdensity(jnp.ones((5,)))
    with pytest.raises(grepvi.ModelError, match=r"rate.*\(3,\)"):
        grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma(shape=(3,))}, num_steps=2)


def test_error_on_nonfinite_initial_log_density():
    def logdensity_fn(z):
        return jnp.sum(jnp.log(z["prob"] - 2.0))  # log of a negative number

    with pytest.raises(grepvi.ModelError, match="initial point"):
        grepvi.fit(logdensity_fn, {"prob": grepvi.Beta(shape=(2,))}, num_steps=2)


def test_a_script_whose_model_fails_its_check_exits_with_the_error_not_an_abort():
    """The window compiles on a thread while the model is checked
    (``driver.make_window``'s ``compile_in_background``): where the check raises and the
    script ends, the process waits for the compiler and exits with the error (status 1). A
    daemon thread inside XLA at the interpreter's exit aborted it (SIGABRT, status -6)."""
    import subprocess
    import sys

    script = (
        "import jax.numpy as jnp, grepvi\n"
        "log_p = lambda z: jnp.sum(jnp.log(z['prob'] - 2.0))  # log of a negative number\n"
        "grepvi.fit(log_p, {'prob': grepvi.Beta(shape=(2,))}, progress=False)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ModelError" in done.stderr and "initial point" in done.stderr


def test_error_on_unknown_estimator_lists_known_ones():
    with pytest.raises(grepvi.ConfigError, match="unknown name 'magic'.*grep"):
        grepvi.fit(_poisson_logdensity([1.0]), {"rate": grepvi.Gamma()}, "magic", num_steps=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_steps": 0}, "num_steps"),
        ({"step_size": -1.0}, "step_size"),
        ({"num_samples": 0}, "num_samples"),
    ],
)
def test_error_on_bad_numbers(kwargs, match):
    options = {"num_steps": 2, **kwargs}
    with pytest.raises(grepvi.ConfigError, match=match):
        grepvi.fit(_poisson_logdensity([1.0]), {"rate": grepvi.Gamma()}, **options)


def test_error_when_latents_are_not_families():
    with pytest.raises(grepvi.ModelError, match="latent 'rate'.*family"):
        grepvi.fit(_poisson_logdensity([1.0]), {"rate": 3.0}, num_steps=2)


def test_error_when_local_logdensity_has_wrong_shape():
    def local(z):
        return {"rate": jnp.zeros((2,))}

    with pytest.raises(grepvi.ModelError, match=r"latent 'rate'.*\(2,\).*\(3,\)"):
        grepvi.fit(
            _poisson_logdensity(jnp.ones(3)),
            {"rate": grepvi.Gamma(shape=(3,))},
            num_steps=2,
            local_logdensity_fn=local,
        )


def test_nonfinite_gradient_steps_are_skipped_and_counted():
    """A model whose gradient is NaN for some draws: those steps are skipped, never applied."""

    def logdensity_fn(z):
        rate = z["rate"]
        spike = jnp.where(rate > 1.5, jnp.nan, 0.0)  # NaN value and gradient for large draws
        return jnp.sum(2.0 * jnp.log(rate) - rate) + jnp.sum(spike * rate)

    with pytest.warns(grepvi.errors.NonFiniteStepWarning, match=r"latent\(s\) \['rate'\]"):
        result = grepvi.fit(
            logdensity_fn, {"rate": grepvi.Gamma(shape=(2,))}, step_size=0.1, num_steps=200, progress=False
        )
    assert result.num_skipped_steps > 0
    for leaf in jax.tree_util.tree_leaves(result.params):
        assert np.all(np.isfinite(np.asarray(leaf)))


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
@pytest.mark.filterwarnings("ignore::grepvi.errors.NonFiniteStepWarning")
def test_the_default_procedure_leaves_rare_nonfinite_draws_out_of_their_step():
    """NaN for rare draws (rate > 12: about 0.05% of them, a few of every thousand steps of 64
    draws of 2 elements): those draws are left out of their step's average, no step is
    skipped, and the answer is the posterior's (a gamma(3, 1), cut at 12: mean 2.99)."""

    def logdensity_fn(z):
        rate = z["rate"]
        spike = jnp.where(rate > 12.0, jnp.nan, 0.0)
        return jnp.sum(2.0 * jnp.log(rate) - rate) + jnp.sum(spike * rate)

    result = grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma(shape=(2,))}, num_steps=2000, progress=False)
    assert result.num_skipped_steps == 0
    assert np.max(result.trace.extras["unusable_draws"]) > 0  # the NaN draws were met, and left out
    for leaf in jax.tree_util.tree_leaves(result.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    np.testing.assert_allclose(np.asarray(result.posterior["rate"].mean()), 2.99, rtol=0.05)


def test_the_default_procedure_stops_a_stalled_run_naming_the_latent():
    with pytest.warns(grepvi.errors.NonFiniteStepWarning):  # the skipped steps, summarized first
        with pytest.raises(grepvi.NumericalError, match=r"\['rate'\].*stalled"):
            grepvi.fit(_nan_grad, {"rate": grepvi.Gamma(shape=(2,))}, progress=False)


def test_a_stalled_run_raises_numerical_error_naming_the_latent():
    """Every gradient non-finite: after ``STALL_STEPS`` skipped steps in a row, a clear error."""

    with pytest.warns(grepvi.errors.NonFiniteStepWarning):
        with pytest.raises(grepvi.NumericalError, match=r"in a row.*\['rate'\].*stalled"):
            grepvi.fit(
                _nan_grad,
                {"rate": grepvi.Gamma(shape=(2,))},
                num_steps=120,
                step_size=0.1,
                chunk_size=60,
                progress=False,
            )


@jax.custom_jvp
def _nan_grad_core(x):
    return jnp.sum(jnp.log(x))


@_nan_grad_core.defjvp
def _nan_grad_core_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _nan_grad_core(x), jnp.sum(t * jnp.nan)


def _nan_grad(z):
    """Finite value, NaN gradient (so the initial-point check passes and every step is skipped)."""
    return _nan_grad_core(z["rate"])


@pytest.mark.slow  # 25-34 s (three DEF fits); every CLI run of the DEF fits its model.target()
def test_fit_takes_a_models_target_and_hands_it_log_space_draws():
    """``fit(model.target(), data=model.data)`` runs the model's log-space factors: the same
    parameters, bit for bit, as the explicit call with ``log_space=True``; the value-space
    functions (``model.logdensity_fn``) give the same answer to float rounding."""
    from grepvi.models import sparse_gamma_def

    counts = np.random.default_rng(0).poisson(1.5, (6, 8)).astype(np.float32)
    model = sparse_gamma_def(counts, layer_sizes=(3, 2))
    common = {"data": model.data, "step_size": 0.5, "num_steps": 60, "progress": False}
    by_target = grepvi.fit(model.target(), **common)
    explicit = grepvi.fit(
        model.joint.logdensity_fn,
        model.latents(),
        local_logdensity_fn=model.joint.local_logdensity_fn,
        log_space=True,
        **common,
    )
    values = grepvi.fit(
        model.logdensity_fn, model.latents(), local_logdensity_fn=model.local_logdensity_fn, **common
    )
    for a, b, c in zip(
        *(jax.tree_util.tree_leaves(r.params) for r in (by_target, explicit, values)), strict=True
    ):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-3, atol=1e-4)
    assert np.mean(by_target.trace.elbo[-10:]) > np.mean(by_target.trace.elbo[:10])
    with pytest.raises(grepvi.ConfigError, match="data"):
        grepvi.fit(model.target(), step_size=0.5, num_steps=2, progress=False)


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_a_time_budget_counts_the_setup_before_the_run():
    """``time_budget`` is wall time from the call: the run's clock (``WindowEvent.wall_time``,
    the trace's) includes the 2 s that the model's first evaluation (the check before the
    run) takes. Measured against the test's own clock after each window: they agree to well
    under those 2 s (before, the run's clock started after the setup, 2 s late)."""
    import time

    model = testing.gamma_poisson()
    calls, gaps = [0], []

    def slow_first_call(latents):
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(2.0)
        return model.logdensity_fn(latents)

    def callback(event):
        gaps.append(time.perf_counter() - called - event.wall_time)

    called = time.perf_counter()
    result = grepvi.fit(slow_first_call, model.families, time_budget=3.0, progress=False, callback=callback)
    assert gaps and max(abs(gap) for gap in gaps) < 1.0, gaps
    assert result.trace.wall_time[0] >= 2.0

"""A NumPyro model's ``numpyro.deterministic`` sites under the fitted ``q``
(:meth:`NumPyroModel.deterministic`, and in ``to_inference_data``'s posterior group)."""

import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")

import jax.numpy as jnp  # noqa: E402
import numpyro.distributions as dist  # noqa: E402

from grepvi.interop.arviz_io import posterior_draws, to_inference_data  # noqa: E402
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

Y = np.random.default_rng(5).normal(1.0, 2.0, 50).astype(np.float32)


def log_scale_model(y):
    log_sigma = numpyro.sample("log_sigma", dist.Normal(0.0, 2.0))
    sigma = numpyro.deterministic("sigma", jnp.exp(log_sigma))
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    numpyro.deterministic("shifted", mu + 1.0)
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def test_deterministic_sites_are_the_model_at_the_draws_of_q():
    adapted = from_numpyro(log_scale_model, Y)
    result = adapted.fit(progress=False, seed=0)
    values = adapted.deterministic(result, num_draws=4000, seed=3)
    draws = posterior_draws(result, 4000, 3)
    # draw by draw: the same draws of q, the model's own arithmetic on them
    np.testing.assert_allclose(values["sigma"], np.exp(np.asarray(draws["log_sigma"])), rtol=1e-6)
    np.testing.assert_allclose(values["shifted"], np.asarray(draws["mu"]) + 1.0, rtol=1e-6)
    # and their mean is E_q[exp(log sigma)] = exp(m + s^2 / 2) of q's Normal, within 4 MC se
    q = result.posterior["log_sigma"]
    m, s = float(q.mean()), float(np.sqrt(q.variance()))
    exact = np.exp(m + s**2 / 2)
    se = np.std(values["sigma"]) / np.sqrt(values["sigma"].size)
    assert abs(values["sigma"].mean() - exact) < 4 * se, (values["sigma"].mean(), exact, se)


def test_to_inference_data_puts_them_in_the_posterior_group():
    pytest.importorskip("arviz")
    adapted = from_numpyro(log_scale_model, Y)
    result = adapted.fit(progress=False, seed=0)
    data = to_inference_data(result, num_draws=300, seed=1, deterministic=adapted)
    sigma = np.asarray(data.posterior["sigma"])
    log_sigma = np.asarray(data.posterior["log_sigma"])
    assert sigma.shape == log_sigma.shape == (1, 300)
    np.testing.assert_allclose(sigma, np.exp(log_sigma), rtol=1e-6)


def test_a_model_without_deterministic_sites_has_none():
    def plain(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("n", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    adapted = from_numpyro(plain, Y)
    assert adapted.deterministic_fn is None
    assert adapted.deterministic(adapted.fit(progress=False, seed=0), num_draws=10) == {}

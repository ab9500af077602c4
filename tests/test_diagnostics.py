"""PSIS Pareto-k (``grepvi.diagnostics.pareto``): the GPD fit, and the reading on good and bad ``q``.

Statistical with fixed seeds. The thresholds have wide margins: an exact ``q`` gives bounded
(here constant up to round-off) importance weights, ``k`` well below 0.5; an underdispersed
Gaussian ``N(0, s^2)`` for a ``N(0, 1)`` target has weights with Pareto tail index
``k = 1 - s^2`` (0.91 for ``s = 0.3``), far above 0.7.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import grepvi
from grepvi import numerics, testing
from grepvi.diagnostics import pareto as diagnostics
from grepvi.errors import ConfigError


@pytest.mark.parametrize("true_k", [-0.3, 0.2, 0.5, 0.9])
def test_gpd_fit_recovers_known_shape(true_k):
    """Zhang-Stephens (with the weak prior towards 0.5) on 1,000 GPD draws of known shape, and
    scipy's maximum likelihood as a second opinion."""
    draws = scipy.stats.genpareto.rvs(true_k, scale=2.0, size=1000, random_state=np.random.default_rng(0))
    k, sigma = diagnostics.fit_generalized_pareto(draws)
    assert abs(k - true_k) < 0.12
    assert abs(sigma / 2.0 - 1.0) < 0.2
    k_mle, _, _ = scipy.stats.genpareto.fit(draws, floc=0.0)
    assert abs(k - k_mle) < 0.12


def test_tail_length_and_threshold():
    assert diagnostics.psis_tail_length(100) == 20
    assert diagnostics.psis_tail_length(4000) == math.ceil(3 * math.sqrt(4000))
    assert diagnostics.reliability_threshold(4000) == 0.7
    assert diagnostics.reliability_threshold(100) == 0.5
    with pytest.raises(ConfigError):
        diagnostics.pareto_k_from_log_ratios(np.zeros(50))


def test_pareto_k_near_zero_for_exact_posterior():
    model = testing.gamma_poisson()
    posterior = model.posterior["rate"]
    params = {
        "rate": {
            "concentration": numerics.inverse_softplus(jnp.float32(posterior["concentration"])),
            "mean": numerics.inverse_softplus(jnp.float32(posterior["concentration"] / posterior["rate"])),
        }
    }
    result = grepvi.pareto_k(model.logdensity_fn, model.families, params, jax.random.key(0), 4000)
    assert result.k < 0.5
    assert result.reliable


def test_pareto_k_near_zero_for_slightly_wrong_q():
    """A gamma ``q`` 10% off the posterior's shape: light-tailed weights, ``k < 0.5``."""
    model = testing.gamma_poisson()
    posterior = model.posterior["rate"]
    shape = float(posterior["concentration"]) * 1.1
    params = {
        "rate": {
            "concentration": numerics.inverse_softplus(jnp.float32(shape)),
            "mean": numerics.inverse_softplus(jnp.float32(posterior["concentration"] / posterior["rate"])),
        }
    }
    result = grepvi.pareto_k(model.logdensity_fn, model.families, params, jax.random.key(1), 4000)
    assert result.k < 0.5


@pytest.mark.parametrize("scale", [0.3])
def test_pareto_k_large_for_underdispersed_gaussian(scale):
    """``q = N(0, scale^2)`` in 5 dimensions against a standard normal target."""

    def logdensity_fn(z):
        return -0.5 * jnp.sum(z["x"] ** 2)

    families = {"x": grepvi.Normal(shape=(5,))}
    params = {"x": {"loc": jnp.zeros(5), "scale": numerics.inverse_softplus(jnp.full(5, scale))}}
    result = grepvi.pareto_k(logdensity_fn, families, params, jax.random.key(2), 4000)
    assert result.k > 0.7
    assert not result.reliable


def test_pareto_k_on_fitted_advi_result():
    """ADVI's log-normal on gamma-Poisson (posterior Gamma(13.1, 5.3)): close, so reliable."""
    model = testing.gamma_poisson()
    result = grepvi.fit(
        model.logdensity_fn, model.families, "advi", num_steps=500, step_size=0.5, progress=False
    )
    diagnostic = grepvi.pareto_k(model.logdensity_fn, result.families, result.params, jax.random.key(3), 4000)
    assert diagnostic.k < 0.7


def test_zero_and_undefined_weights():
    """Log ratio -inf (p vanishes at a draw) is a weight of zero and is kept; NaN or +inf
    (q vanishes where p does not) leaves no finite estimate."""
    log_ratios = np.random.default_rng(0).normal(size=1000)
    log_ratios[:5] = -np.inf
    assert np.isfinite(diagnostics.pareto_k_from_log_ratios(log_ratios).k)
    log_ratios[0] = np.nan
    result = diagnostics.pareto_k_from_log_ratios(log_ratios)
    assert result.k == math.inf and not result.reliable

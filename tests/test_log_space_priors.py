"""The NumPyro adapter's closed-form priors in log (logit) space against scipy.

``_log_space_log_prob(fn, u, space)`` is ``log p(z)`` of a latent's own distribution from
``u = log z`` (``logit z`` for a Beta), with ``z``'s prior parameters possibly latents
themselves (a hierarchy's hyperparameters): its value and its gradient in those parameters
must be the density's, at the small shapes this library treats as the normal case and at
large ones, in float32 (the step's precision).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402

from grepvi.interop.numpyro_model import _log_space_log_prob  # noqa: E402

SHAPES = np.array([0.05, 0.1, 0.7, 3.0, 40.0, 900.0])


def _f32(x):
    return jnp.asarray(x, jnp.float32)


@pytest.mark.parametrize("a", SHAPES)
def test_gamma_prior_in_log_space(a):
    rate, z = 2.5, np.array([1e-3, 0.3, 4.0])
    got = _log_space_log_prob(dist.Gamma(_f32(a), _f32(rate)), _f32(np.log(z)), "log")
    expected = stats.gamma.logpdf(z, a, scale=1.0 / rate)
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=2e-6, atol=1e-4 * max(1.0, a))
    # d/da log p(z) = log(rate) - digamma(a) + log z: the hyperparameter's gradient
    grad = jax.grad(lambda s: jnp.sum(_log_space_log_prob(dist.Gamma(s, _f32(rate)), _f32(np.log(z)), "log")))
    expected_grad = np.sum(np.log(rate) - special.digamma(a) + np.log(z))
    np.testing.assert_allclose(float(grad(_f32(a))), expected_grad, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("a", SHAPES)
def test_beta_prior_in_logit_space(a):
    b, z = 2.0, np.array([0.02, 0.5, 0.97])
    u = _f32(special.logit(z))
    got = _log_space_log_prob(dist.Beta(_f32(a), _f32(b)), u, "logit")
    expected = stats.beta.logpdf(z, a, b)
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=2e-6, atol=1e-4 * max(1.0, a))
    grad = jax.grad(lambda s: jnp.sum(_log_space_log_prob(dist.Beta(s, _f32(b)), u, "logit")))
    expected_grad = np.sum(np.log(z) - special.digamma(a) + special.digamma(a + b))
    np.testing.assert_allclose(float(grad(_f32(a))), expected_grad, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("scale", [0.1, 1.0, 50.0])
def test_dirichlet_and_inverse_gamma_priors_in_log_space(scale):
    alpha = scale * np.array([0.5, 1.0, 2.0, 4.0])
    z = np.array([0.1, 0.2, 0.3, 0.4])
    got = _log_space_log_prob(dist.Dirichlet(_f32(alpha)), _f32(np.log(z)), "log")
    np.testing.assert_allclose(float(got), stats.dirichlet.logpdf(z, alpha), rtol=2e-6, atol=1e-3 * scale)
    w = np.array([0.05, 1.5])
    got = _log_space_log_prob(dist.InverseGamma(_f32(scale), _f32(2.0)), _f32(np.log(w)), "log")
    expected = stats.invgamma.logpdf(w, scale, scale=2.0)
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=2e-6, atol=1e-4)

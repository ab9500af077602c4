"""An ordered latent's prior is evaluated at its unconstrained draw, not at the rounded value.

``z_k = z_{k-1} + exp(u_k)`` rounds to ``z_{k-1}`` in float32 below ``u_k`` of about
``-17 + log|z|``; NumPyro's ordered prior, ``TransformedDistribution(base, OrderedTransform())``,
inverts ``z`` to get ``u`` back, and there got another ``u`` (or ``-inf``). The adapter hands an
ordered latent to the factors as ``u`` and evaluates such a prior forward from it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.stats import norm
from numpyro.distributions.transforms import ExpTransform, OrderedTransform

from grepvi.interop.numpyro_model import from_numpyro


def _ordered_prior(y, positive=False):
    transforms = [OrderedTransform(), ExpTransform()] if positive else [OrderedTransform()]
    base = dist.Normal(0.0, 10.0).expand([3]).to_event(1)
    loc = numpyro.sample("loc", dist.TransformedDistribution(base, transforms))
    numpyro.sample("y", dist.Normal(loc[0], 1.0), obs=y)


def _exact(u, positive):
    """``log p(z)`` at ``z = T(u)`` (the value-space density the factors return), from ``u``."""
    log_det = jnp.sum(u[1:]) + (jnp.sum(OrderedTransform()(u)) if positive else 0.0)
    first = jnp.exp(u[0]) if positive else u[0]
    return jnp.sum(norm.logpdf(u, 0.0, 10.0)) - log_det + norm.logpdf(0.5, first, 1.0)


def test_the_log_joint_is_exact_where_the_gaps_round_away():
    for positive in (False, True):
        adapted = from_numpyro(lambda y, p=positive: _ordered_prior(y, p), jnp.asarray(0.5))
        for point in ([0.5, -20.0, 3.0], [0.1, -30.0, -40.0], [0.5, 1.0, -2.0]):
            u = jnp.asarray(point, jnp.float32)
            log_joint = adapted.joint.logdensity_fn
            value, grad = jax.value_and_grad(lambda u, a=adapted, f=log_joint: f({"loc": u}, a.data))(u)
            exact, exact_grad = jax.value_and_grad(lambda u, p=positive: _exact(u, p))(u)
            # before: -inf (or the prior at the rounded gap) and a zero derivative in u_2, u_3
            np.testing.assert_allclose(float(value), float(exact), rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(np.asarray(grad), np.asarray(exact_grad), rtol=1e-4, atol=1e-4)


def test_gaps_that_only_the_prior_sees_are_fitted_to_the_prior():
    """The posterior of the gaps is their prior, ``Normal(0, 10)``; the first element's is
    ``Normal(0.495, 0.995)``. Through the rounded value the defaults fitted means of 1.1 and 4.1
    (0.11 and 0.41 sd off) and standard deviations of 8.3 and 7.5."""
    result = from_numpyro(_ordered_prior, jnp.asarray(0.5)).fit(progress=False)
    assert result.convergence.converged
    params = result.params["loc"]
    mean, sd = np.asarray(params["loc"]), np.asarray(jax.nn.softplus(params["scale"]))
    exact_mean, exact_sd = np.array([0.5 * 100 / 101, 0.0, 0.0]), np.array([np.sqrt(100 / 101), 10.0, 10.0])
    # the rule's tolerance is 0.005 sd (root mean square); 0.05 sd and 3% leave room for its noise
    np.testing.assert_array_less(np.abs(mean - exact_mean) / exact_sd, 0.05)
    np.testing.assert_allclose(sd, exact_sd, rtol=0.03)

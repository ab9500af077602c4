"""Seven NumPyro models (and one of them on other data) written in the forty-first session with
the constructs of NumPyro's own examples and tutorials that the other benchmark models lack, each
written before it was run (simulated data, this module's own fixed seed):

* ``eight_schools_reparam``: eight schools written as NumPyro's documentation writes it, centred
  in the model and non-centred by ``handlers.reparam`` with ``LocScaleReparam(centered=0)``.
* ``ar1_scan``: an AR(1) series of 100 points whose likelihood is a
  ``numpyro.contrib.control_flow.scan`` over time, ``phi ~ Uniform(-1, 1)``,
  ``sigma ~ HalfNormal(1)``.
* ``logistic_deterministic``: logistic regression, 200 rows x 3 features, the coefficients one
  ``expand([3]).to_event(1)`` site, the logits a ``numpyro.deterministic`` site.
* ``weibull_lognormal``: Weibull lifetimes, 150 rows, ``k ~ Exponential(1)``, the scale
  ``LogNormal(0, 1)``.
* ``masked_normal``: a normal mean and an ``InverseGamma(2, 2)`` scale, every fifth of 50
  observations masked out by ``Normal(...).mask(m)``.
* ``gp_30``: Gaussian-process regression as NumPyro's GP example writes it: 30 points on
  ``[0, 5]``, ``LogNormal(0, 1)`` amplitude and length scale, ``HalfNormal(1)`` noise variance,
  the likelihood one ``MultivariateNormal(0, K)`` site (the other benchmark GP, ``gp`` of
  ``user_models.py``, has 20 points and a squared noise scale).
* ``student_location``: a Student-t location with a ``StudentT(3, 0, 10)`` prior and a
  ``Gamma(2, 0.1)`` degrees of freedom, 50 points.

``gp_30_first`` is ``gp_30`` on the targets the session first drew (another stream), where
the default fit's seed 0 ran five stages (``benchmarks/seed_spread.py``). ``python
benchmarks/time_to_answer.py --examples``; the first run is in ``docs/performance.md``
(forty-first session).
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["EXAMPLE_MODELS"]

_RNG = np.random.default_rng(41)

SCHOOL_EFFECTS = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
SCHOOL_SES = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)


def _ar1_series(length=100, phi=0.7, sigma=0.5):
    series = np.zeros(length, np.float32)
    for t in range(1, length):
        series[t] = phi * series[t - 1] + sigma * _RNG.normal()
    return series


AR1_Y = _ar1_series()
LOGISTIC_X = _RNG.normal(size=(200, 3)).astype(np.float32)
LOGISTIC_Y = (
    _RNG.uniform(size=200) < 1.0 / (1.0 + np.exp(-(LOGISTIC_X @ np.array([1.0, -2.0, 0.5]))))
).astype(np.float32)
WEIBULL_T = (2.0 * _RNG.weibull(1.5, size=150)).astype(np.float32)
MASKED_Y = _RNG.normal(3.0, 2.0, size=50).astype(np.float32)
MASKED_KEEP = np.arange(50) % 5 != 0
GP_X = np.linspace(0.0, 5.0, 30).astype(np.float32)
GP_Y = (np.sin(GP_X) + _RNG.normal(0.0, 0.2, size=30)).astype(np.float32)
STUDENT_Y = (1.5 + _RNG.standard_t(4, size=50)).astype(np.float32)


def _first_gp_data():
    """The GP's targets as the session first drew them (a scratch script's stream: seed 0,
    after the draws of the other models' data), on which seed 0's default fit ran five stages."""
    rng = np.random.default_rng(0)
    for _ in range(99):
        rng.normal()
    rng.normal(size=(200, 3)), rng.uniform(size=200), rng.weibull(1.5, size=150), rng.normal(3.0, 2.0, 50)
    return (np.sin(GP_X) + rng.normal(0.0, 0.2, size=30)).astype(np.float32)


GP_Y_FIRST = _first_gp_data()


def eight_schools_reparam(sigma, y):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer.reparam import LocScaleReparam

    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("J", y.shape[0]):
        with numpyro.handlers.reparam(config={"theta": LocScaleReparam(centered=0)}):
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def ar1_scan(y):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.control_flow import scan

    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))

    def transition(previous, y_t):
        numpyro.sample("y", dist.Normal(phi * previous, sigma), obs=y_t)
        return y_t, None

    scan(transition, y[0], y[1:])


def logistic_deterministic(x, y):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    logits = numpyro.deterministic("logits", x @ w + b)
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)


def weibull_lognormal(t):
    import numpyro
    import numpyro.distributions as dist

    k = numpyro.sample("k", dist.Exponential(1.0))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("n", t.shape[0]):
        numpyro.sample("t", dist.Weibull(scale, k), obs=t)


def masked_normal(y, keep):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    s = numpyro.sample("s", dist.InverseGamma(2.0, 2.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, s).mask(keep), obs=y)


def gp_30(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    amplitude = numpyro.sample("amplitude", dist.LogNormal(0.0, 1.0))
    length = numpyro.sample("length", dist.LogNormal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    squared = (x[:, None] - x[None, :]) ** 2
    kernel = amplitude * jnp.exp(-0.5 * squared / length**2) + (noise + 1e-4) * jnp.eye(x.shape[0])
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(x.shape[0]), covariance_matrix=kernel), obs=y)


def student_location(y):
    import numpyro
    import numpyro.distributions as dist

    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    mu = numpyro.sample("mu", dist.StudentT(3.0, 0.0, 10.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, mu, 1.0), obs=y)


EXAMPLE_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "eight_schools_reparam",
            eight_schools_reparam,
            (SCHOOL_SES, SCHOOL_EFFECTS),
            "eight schools, LocScaleReparam (NumPyro's documentation)",
        ),
        TextbookModel("ar1_scan", ar1_scan, (AR1_Y,), "AR(1), 100 points, contrib.control_flow.scan"),
        TextbookModel(
            "logistic_deterministic",
            logistic_deterministic,
            (LOGISTIC_X, LOGISTIC_Y),
            "logistic regression, 200 x 3, a deterministic site",
        ),
        TextbookModel("weibull_lognormal", weibull_lognormal, (WEIBULL_T,), "Weibull lifetimes, 150 rows"),
        TextbookModel(
            "masked_normal", masked_normal, (MASKED_Y, MASKED_KEEP), "normal, 10 of 50 masked out (.mask)"
        ),
        TextbookModel(
            "gp_30", gp_30, (GP_X, GP_Y), "Gaussian-process regression, 30 points (NumPyro's GP example)"
        ),
        TextbookModel(
            "gp_30_first",
            gp_30,
            (GP_X, GP_Y_FIRST),
            "gp_30 on the targets first drawn (seed 0 ran five stages before the forty-first session)",
        ),
        TextbookModel(
            "student_location", student_location, (STUDENT_Y,), "Student-t location and df, 50 points"
        ),
    )
}

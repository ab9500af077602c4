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

Three more, written in the forty-second session before they were run, after NumPyro's examples
``bnn.py``, ``funnel.py`` and ``ucbadmit.py``:

* ``bnn``: a Bayesian neural network, two ``tanh`` hidden layers of 5 units, ``Normal(0, 1)``
  weights as matrix-valued sites, a ``Gamma(3, 1)`` noise precision, 100 points of NumPyro's
  example's function of ``x`` in ``[-1, 1]`` (features ``1, x, x^2``).
* ``funnel``: Neal's funnel in 10 dimensions, ``y ~ Normal(0, 3)``, ``x ~ Normal(0, exp(y /
  2))``, no data, written non-centred by ``handlers.reparam`` as NumPyro's example does with
  ``--reparam`` (the centred funnel is the same density in other coordinates).
* ``ucbadmit``: the UC Berkeley admissions (Bickel, Hammel & O'Connell 1975; McElreath's
  ``UCBadmit``: 12 rows of admitted of applications by department and gender), a binomial GLMM
  with a department-varying intercept and gender slope, their correlation ``LKJCholesky(2, 2)``,
  non-centred, as NumPyro's example writes it.

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


def _bnn_data(num_points=100, noise=0.1):
    x = np.linspace(-1.0, 1.0, num_points)
    features = np.power(x[:, None], np.arange(3.0))
    weights = 0.5 * _BNN_RNG.standard_normal(3)
    y = features @ weights + 0.5 * np.power(0.5 + x, 2.0) * np.sin(4.0 * x)
    return features.astype(np.float32), (y + noise * _BNN_RNG.standard_normal(num_points)).astype(np.float32)


_BNN_RNG = np.random.default_rng(42)
BNN_X, BNN_Y = _bnn_data()


def bnn(x, y, hidden=5):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((x.shape[1], hidden)), jnp.ones((x.shape[1], hidden))))
    z1 = jnp.tanh(x @ w1)
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros((hidden, hidden)), jnp.ones((hidden, hidden))))
    z2 = jnp.tanh(z1 @ w2)
    w3 = numpyro.sample("w3", dist.Normal(jnp.zeros((hidden, 1)), jnp.ones((hidden, 1))))
    mean = (z2 @ w3).squeeze(-1)
    precision = numpyro.sample("precision", dist.Gamma(3.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(mean, 1.0 / jnp.sqrt(precision)), obs=y)


def funnel(dim=10):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer.reparam import LocScaleReparam

    with numpyro.handlers.reparam(config={"x": LocScaleReparam(0)}):
        y = numpyro.sample("y", dist.Normal(0.0, 3.0))
        numpyro.sample("x", dist.Normal(jnp.zeros(dim - 1), jnp.exp(y / 2)))


# department (A-F), male (1) or female (0), applications, admitted
UCB_ADMIT = np.array(
    [
        [0, 1, 825, 512], [0, 0, 108, 89], [1, 1, 560, 353], [1, 0, 25, 17],
        [2, 1, 325, 120], [2, 0, 593, 202], [3, 1, 417, 138], [3, 0, 375, 131],
        [4, 1, 191, 53], [4, 0, 393, 94], [5, 1, 373, 22], [5, 0, 341, 24],
    ]
)  # fmt: skip


def ucbadmit(dept, male, applications, admit):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    v_mu = numpyro.sample("v_mu", dist.Normal(0.0, jnp.array([4.0, 1.0])))
    sigma = numpyro.sample("sigma", dist.HalfNormal(jnp.ones(2)))
    l_rho = numpyro.sample("L_Rho", dist.LKJCholesky(2, concentration=2.0))
    scale_tril = sigma[..., None] * l_rho
    z = numpyro.sample("z", dist.Normal(jnp.zeros((6, 2)), 1.0))
    v = jnp.dot(scale_tril, z.T).T
    logits = v_mu[0] + v[dept, 0] + (v_mu[1] + v[dept, 1]) * male
    numpyro.sample("admit", dist.Binomial(applications, logits=logits), obs=admit)


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
        TextbookModel("bnn", bnn, (BNN_X, BNN_Y), "Bayesian neural network, 2 x 5 tanh units, 100 points"),
        TextbookModel("funnel", funnel, (), "Neal's funnel, 10 dimensions, non-centred by handlers.reparam"),
        TextbookModel(
            "ucbadmit",
            ucbadmit,
            (
                UCB_ADMIT[:, 0].astype(np.int32),
                UCB_ADMIT[:, 1].astype(np.float32),
                UCB_ADMIT[:, 2].astype(np.float32),
                UCB_ADMIT[:, 3].astype(np.float32),
            ),
            "UC Berkeley admissions, binomial GLMM, LKJCholesky (NumPyro's ucbadmit example)",
        ),
    )
}

"""Eleven NumPyro models whose latents or likelihoods have supports and distributions the other
benchmark models lack, written in the forty-third session before they were run (simulated
data, this module's own fixed seed):

* ``von_mises``: a circular mean, ``mu ~ VonMises(0, 0.5)``, ``kappa ~ Gamma(2, 0.5)``, 40 angles.
* ``zero_sum``: five group effects under ``ZeroSumNormal(1)`` (a zero-sum vector), a
  ``HalfNormal(2)`` noise scale, 8 rows per group.
* ``log_uniform_scale``: a normal scale under ``LogUniform(0.01, 100)`` (an interval), 30 points.
* ``chi2_df``: Student-t degrees of freedom under ``Chi2(5)``, 60 points.
* ``kumaraswamy``: a Bernoulli probability under ``Kumaraswamy(2, 2)``, 50 trials.
* ``gamma_poisson``: overdispersed counts, ``GammaPoisson(c, r)`` with ``c ~ Exponential(0.5)``,
  ``r ~ Gamma(1, 1)``, 80 counts (the concentration and rate strongly correlated a posteriori).
* ``low_rank_mvn``: a 4-vector under ``LowRankMultivariateNormal`` (rank one), 10 observations.
* ``ar1_uniform``: an AR(1) coefficient under ``Uniform(-1, 1)`` with an ``Exponential(1)``
  scale, the likelihood vectorized over 80 lagged points.
* ``lkj_mvn``: a 3-dimensional normal's correlation ``LKJCholesky(3, 2)`` and ``HalfCauchy(1)``
  scales, 50 observations.
* ``random_walk_poisson``: a log rate as a 30-step ``GaussianRandomWalk`` with a
  ``HalfNormal(1)`` scale (centred), Poisson counts.
* ``asymmetric_laplace``: a ``SoftLaplace(0, 2)`` location and an ``InverseGamma(3, 2)`` scale
  under an ``AsymmetricLaplace`` likelihood of asymmetry 1.5, 60 points.

``python benchmarks/time_to_answer.py --supports``; the run is in ``docs/performance.md``
(forty-third session).
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["SUPPORT_MODELS"]

_RNG = np.random.default_rng(43)

VON_MISES_Y = _RNG.vonmises(1.0, 4.0, 40).astype(np.float32)
ZERO_SUM_GROUP = np.repeat(np.arange(5), 8).astype(np.int32)
ZERO_SUM_Y = (np.array([-1.0, -0.5, 0.0, 0.5, 1.0])[ZERO_SUM_GROUP] + _RNG.normal(size=40)).astype(np.float32)
LOG_UNIFORM_Y = _RNG.normal(0.0, 3.0, 30).astype(np.float32)
CHI2_Y = _RNG.standard_t(4.0, 60).astype(np.float32)
KUMARASWAMY_Y = (_RNG.uniform(size=50) < 0.3).astype(np.float32)
GAMMA_POISSON_Y = _RNG.negative_binomial(3, 0.4, 80).astype(np.float32)
LOW_RANK_Y = (_RNG.normal(size=(10, 4)) + np.array([1.0, 0.5, -0.5, 2.0])).astype(np.float32)


def _ar1_series(n=80, phi=0.6):
    noise = _RNG.normal(size=n)
    x = np.zeros(n)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + noise[t]
    return x.astype(np.float32)


AR1_Y = _ar1_series()
LKJ_Y = _RNG.multivariate_normal(np.zeros(3), [[1.0, 0.5, 0.2], [0.5, 2.0, 0.3], [0.2, 0.3, 1.0]], 50).astype(
    np.float32
)
RANDOM_WALK_Y = _RNG.poisson(np.exp(np.cumsum(_RNG.normal(0.0, 0.2, 30)) + 1.0)).astype(np.float32)
LAPLACE_Y = _RNG.laplace(1.0, 1.0, 60).astype(np.float32)


def von_mises(y):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.VonMises(0.0, 0.5))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 0.5))
    numpyro.sample("y", dist.VonMises(mu, kappa), obs=y)


def zero_sum(group, y):
    import numpyro
    import numpyro.distributions as dist

    effect = numpyro.sample("effect", dist.ZeroSumNormal(1.0, event_shape=(5,)))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    numpyro.sample("y", dist.Normal(effect[group], sigma), obs=y)


def log_uniform_scale(y):
    import numpyro
    import numpyro.distributions as dist

    scale = numpyro.sample("scale", dist.LogUniform(0.01, 100.0))
    numpyro.sample("y", dist.Normal(0.0, scale), obs=y)


def chi2_df(y):
    import numpyro
    import numpyro.distributions as dist

    df = numpyro.sample("df", dist.Chi2(5.0))
    numpyro.sample("y", dist.StudentT(df, 0.0, 1.0), obs=y)


def kumaraswamy(y):
    import numpyro
    import numpyro.distributions as dist

    p = numpyro.sample("p", dist.Kumaraswamy(2.0, 2.0))
    numpyro.sample("y", dist.Bernoulli(p), obs=y)


def gamma_poisson(y):
    import numpyro
    import numpyro.distributions as dist

    concentration = numpyro.sample("concentration", dist.Exponential(0.5))
    rate = numpyro.sample("rate", dist.Gamma(1.0, 1.0))
    numpyro.sample("y", dist.GammaPoisson(concentration, rate), obs=y)


def low_rank_mvn(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    prior = dist.LowRankMultivariateNormal(jnp.zeros(4), 0.8 * jnp.ones((4, 1)), jnp.ones(4))
    z = numpyro.sample("z", prior)
    numpyro.sample("y", dist.Normal(z, 1.0), obs=y)


def ar1_uniform(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    previous = jnp.concatenate([jnp.zeros(1), y[:-1]])
    numpyro.sample("y", dist.Normal(phi * previous, sigma), obs=y)


def lkj_mvn(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    corr = numpyro.sample("corr", dist.LKJCholesky(3, 2.0))
    sd = numpyro.sample("sd", dist.HalfCauchy(jnp.ones(3)))
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(3), scale_tril=sd[:, None] * corr), obs=y)


def random_walk_poisson(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    log_rate = numpyro.sample("log_rate", dist.GaussianRandomWalk(scale, y.shape[0]))
    numpyro.sample("y", dist.Poisson(jnp.exp(log_rate)), obs=y)


def asymmetric_laplace(y):
    import numpyro
    import numpyro.distributions as dist

    loc = numpyro.sample("loc", dist.SoftLaplace(0.0, 2.0))
    scale = numpyro.sample("scale", dist.InverseGamma(3.0, 2.0))
    numpyro.sample("y", dist.AsymmetricLaplace(loc, scale, 1.5), obs=y)


SUPPORT_MODELS = {
    model.name: model
    for model in (
        TextbookModel("von_mises", von_mises, (VON_MISES_Y,), "circular mean and concentration, 40 angles"),
        TextbookModel(
            "zero_sum", zero_sum, (ZERO_SUM_GROUP, ZERO_SUM_Y), "five ZeroSumNormal group effects, 40 rows"
        ),
        TextbookModel(
            "log_uniform_scale", log_uniform_scale, (LOG_UNIFORM_Y,), "LogUniform(0.01, 100) scale, 30 points"
        ),
        TextbookModel("chi2_df", chi2_df, (CHI2_Y,), "Student-t df under Chi2(5), 60 points"),
        TextbookModel(
            "kumaraswamy", kumaraswamy, (KUMARASWAMY_Y,), "Kumaraswamy(2, 2) probability, 50 trials"
        ),
        TextbookModel(
            "gamma_poisson",
            gamma_poisson,
            (GAMMA_POISSON_Y,),
            "GammaPoisson concentration and rate, 80 counts",
        ),
        TextbookModel("low_rank_mvn", low_rank_mvn, (LOW_RANK_Y,), "LowRankMultivariateNormal 4-vector"),
        TextbookModel("ar1_uniform", ar1_uniform, (AR1_Y,), "AR(1), Uniform(-1, 1) coefficient, 80 points"),
        TextbookModel("lkj_mvn", lkj_mvn, (LKJ_Y,), "3-d normal, LKJCholesky and HalfCauchy scales"),
        TextbookModel(
            "random_walk_poisson",
            random_walk_poisson,
            (RANDOM_WALK_Y,),
            "30-step GaussianRandomWalk log rate (centred), Poisson counts",
        ),
        TextbookModel(
            "asymmetric_laplace",
            asymmetric_laplace,
            (LAPLACE_Y,),
            "SoftLaplace location, InverseGamma scale, AsymmetricLaplace data",
        ),
    )
}

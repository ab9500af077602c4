"""Ten models of medium size (100 to 3,000 latent elements), written in the sixty-fifth session
as NumPyro users write them, before anything was run on them. The earlier sets are mostly
textbook-small (under 100 elements); these are where a step's cost, the tolerance's switch
between small and large models (64 and 1,024 elements) and a diagonal ``q`` over many
correlated coefficients meet.

Sizes (counties, groups, classes, rank, topics, clinics) are passed as ``np.arange(n)`` and
read from its length: the benchmark hands every argument through ``jnp.asarray``, and NumPyro's
SVI and NUTS trace their arguments, so a plain ``int`` became a traced array in ``plate`` (all
three contenders failed on the first draft). grepvi's ``from_numpyro`` keeps a Python ``int``
static: ``radon_slopes`` written with ``counties=85`` converged in the same 3,550 iterations.

* ``radon_slopes``: Gelman and Hill's radon model with varying intercepts and slopes, 85
  counties, 919 houses (simulated on their design: county sizes 1-116, a floor indicator),
  non-centred: 174 elements.
* ``logistic_groups_500``: a hierarchical logistic regression, 500 groups of 4-40 rows
  (10,930 rows in all), group intercepts non-centred and one covariate: 503 elements.
* ``ridge_200``: a linear regression on 200 correlated predictors (correlation 0.5 between
  neighbours), 1,000 rows, a global-scale normal prior ``beta ~ N(0, tau)``, ``tau``
  half-Cauchy: 203 elements.
* ``softmax_10``: a multinomial logit with 10 classes and 20 features (200 weights and 10
  intercepts), 3,000 rows.
* ``ar1_panel``: 50 series of 40 steps, each a latent AR(1) state (non-centred innovations)
  observed in normal noise, the AR coefficient and scales shared: 2,003 elements.
* ``poisson_mf``: Poisson matrix factorization of a 200 x 100 count matrix, rank 10, gamma
  priors of shape 0.3 (Gopalan et al.'s setting): 3,000 gamma elements.
* ``lda_marginal``: a topic model with the token assignments summed out, 100 documents over a
  vocabulary of 200 words and 5 topics: 100 Dirichlet(5) rows and 5 Dirichlet(200) rows.
* ``gp_100``: GP regression on 100 inputs with an RBF kernel, the latent function through a
  non-centred Cholesky factor, lengthscale and amplitude log-normal: 103 elements.
* ``frailty_100``: a Weibull survival model with a gamma frailty for each of 100 clinics (1,500
  patients, a third censored, through the survival function as a factor): 103 elements.
* ``negbin_counties``: negative-binomial counts for 300 counties with a log-population offset,
  two covariates and a normal random effect: 305 elements.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["MEDIUM_MODELS"]

_RNG = np.random.default_rng(65)


def _radon_slopes(counties=85):
    sizes = np.clip(_RNG.lognormal(2.0, 1.0, counties).astype(int), 1, 116)
    county = np.repeat(np.arange(counties), sizes)
    floor = _RNG.binomial(1, 0.2, county.size).astype(float)
    a = 1.5 + 0.3 * _RNG.normal(size=counties)
    b = -0.7 + 0.25 * _RNG.normal(size=counties)
    log_radon = a[county] + b[county] * floor + 0.75 * _RNG.normal(size=county.size)
    return (
        county.astype(np.int32),
        floor.astype(np.float32),
        log_radon.astype(np.float32),
        np.arange(counties),
    )


def radon_slopes(county, floor, log_radon, county_ids):
    import numpyro
    import numpyro.distributions as dist

    mu_a = numpyro.sample("mu_a", dist.Normal(0.0, 10.0))
    mu_b = numpyro.sample("mu_b", dist.Normal(0.0, 10.0))
    sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(1.0))
    sigma_b = numpyro.sample("sigma_b", dist.HalfNormal(1.0))
    sigma_y = numpyro.sample("sigma_y", dist.HalfNormal(1.0))
    with numpyro.plate("counties", county_ids.shape[0]):
        z_a = numpyro.sample("z_a", dist.Normal(0.0, 1.0))
        z_b = numpyro.sample("z_b", dist.Normal(0.0, 1.0))
    a = mu_a + sigma_a * z_a
    b = mu_b + sigma_b * z_b
    with numpyro.plate("houses", county.shape[0]):
        numpyro.sample("y", dist.Normal(a[county] + b[county] * floor, sigma_y), obs=log_radon)


def _logistic_groups(groups=500):
    sizes = _RNG.integers(4, 41, groups)
    group = np.repeat(np.arange(groups), sizes)
    x = _RNG.normal(size=group.size)
    alpha = -0.5 + 0.8 * _RNG.normal(size=groups)
    p = 1.0 / (1.0 + np.exp(-(alpha[group] + 1.2 * x)))
    y = _RNG.binomial(1, p)
    return group.astype(np.int32), x.astype(np.float32), y.astype(np.float32), np.arange(groups)


def logistic_groups_500(group, x, y, group_ids):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 2.5))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.5))
    with numpyro.plate("groups", group_ids.shape[0]):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    logits = mu + tau * z[group] + beta * x
    with numpyro.plate("rows", group.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)


def _ridge(n=1000, p=200):
    cov = 0.5 ** np.abs(np.subtract.outer(np.arange(p), np.arange(p)))
    x = _RNG.multivariate_normal(np.zeros(p), cov, n)
    beta = np.where(_RNG.uniform(size=p) < 0.2, _RNG.normal(0.0, 1.0, p), 0.0)
    y = 2.0 + x @ beta + _RNG.normal(0.0, 1.5, n)
    return x.astype(np.float32), y.astype(np.float32)


def ridge_200(x, y):
    import numpyro
    import numpyro.distributions as dist

    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("predictors", x.shape[1]):
        beta = numpyro.sample("beta", dist.Normal(0.0, tau))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(intercept + x @ beta, sigma), obs=y)


def _softmax(n=3000, features=20, classes=10):
    x = _RNG.normal(size=(n, features))
    w = 0.5 * _RNG.normal(size=(features, classes))
    logits = x @ w + 0.3 * _RNG.normal(size=classes)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([_RNG.choice(classes, p=row) for row in p])
    return x.astype(np.float32), y.astype(np.int32), np.arange(classes)


def softmax_10(x, y, class_ids):
    import numpyro
    import numpyro.distributions as dist

    classes = class_ids.shape[0]
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1], classes]).to_event(2))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([classes]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Categorical(logits=x @ w + b), obs=y)


def _ar1_panel(series=50, steps=40):
    phi, sigma, noise = 0.8, 0.5, 0.3
    state = np.zeros((series, steps))
    state[:, 0] = _RNG.normal(0.0, sigma / np.sqrt(1 - phi**2), series)
    for t in range(1, steps):
        state[:, t] = phi * state[:, t - 1] + sigma * _RNG.normal(size=series)
    return ((state + noise * _RNG.normal(size=state.shape)).astype(np.float32),)


def ar1_panel(y):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    series, steps = y.shape
    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    eps = numpyro.sample("eps", dist.Normal(0.0, 1.0).expand([series, steps]).to_event(2))

    def step(previous, e):
        current = phi * previous + sigma * e
        return current, current

    first = eps[:, 0] * sigma / jnp.sqrt(1.0 - phi**2)
    _, rest = jax.lax.scan(step, first, eps[:, 1:].T)
    state = jnp.concatenate([first[:, None], rest.T], axis=1)
    numpyro.sample("y", dist.Normal(state, noise).to_event(2), obs=y)


def _poisson_mf(rows=200, cols=100, rank=10):
    theta = _RNG.gamma(0.3, 1.0 / 0.3, (rows, rank))
    beta = _RNG.gamma(0.3, 1.0 / 0.3, (rank, cols))
    return (_RNG.poisson(theta @ beta).astype(np.float32), np.arange(rank))


def poisson_mf(counts, factor_ids):
    import numpyro
    import numpyro.distributions as dist

    rows, cols = counts.shape
    rank = factor_ids.shape[0]
    theta = numpyro.sample("theta", dist.Gamma(0.3, 0.3).expand([rows, rank]).to_event(2))
    beta = numpyro.sample("beta", dist.Gamma(0.3, 0.3).expand([rank, cols]).to_event(2))
    numpyro.sample("counts", dist.Poisson(theta @ beta).to_event(2), obs=counts)


def _lda(docs=100, vocabulary=200, topics=5, length=80):
    phi = _RNG.dirichlet(np.full(vocabulary, 0.1), topics)
    theta = _RNG.dirichlet(np.full(topics, 0.5), docs)
    counts = np.stack([_RNG.multinomial(length, theta[d] @ phi) for d in range(docs)])
    return counts.astype(np.float32), np.arange(topics)


def lda_marginal(counts, topic_ids):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    docs, vocabulary = counts.shape
    with numpyro.plate("topics", topic_ids.shape[0]):
        phi = numpyro.sample("phi", dist.Dirichlet(jnp.full(vocabulary, 0.1)))
    with numpyro.plate("docs", docs):
        theta = numpyro.sample("theta", dist.Dirichlet(jnp.full(topic_ids.shape[0], 0.5)))
        numpyro.sample("counts", dist.Multinomial(total_count=80, probs=theta @ phi), obs=counts)


def _gp(n=100):
    x = np.sort(_RNG.uniform(0.0, 10.0, n))
    f = np.sin(x) + 0.5 * np.sin(2.7 * x)
    return x.astype(np.float32), (f + _RNG.normal(0.0, 0.3, n)).astype(np.float32)


def gp_100(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    lengthscale = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
    amplitude = numpyro.sample("amplitude", dist.LogNormal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    k = amplitude**2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    chol = jnp.linalg.cholesky(k + 1e-5 * jnp.eye(x.shape[0]))
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([x.shape[0]]).to_event(1))
    numpyro.sample("y", dist.Normal(chol @ z, noise).to_event(1), obs=y)


def _frailty(clinics=100, patients=1500):
    clinic = _RNG.integers(0, clinics, patients)
    treated = _RNG.binomial(1, 0.5, patients).astype(float)
    frailty = _RNG.gamma(2.0, 0.5, clinics)
    shape = 1.3
    scale = np.exp(-(-3.0 + (-0.5) * treated + np.log(frailty[clinic])) / shape)
    time = scale * _RNG.weibull(shape, patients)
    censor_at = _RNG.uniform(0.0, np.quantile(time, 0.9) * 1.5, patients)
    observed = (time <= censor_at).astype(float)
    return (
        clinic.astype(np.int32),
        treated.astype(np.float32),
        np.minimum(time, censor_at).astype(np.float32),
        observed.astype(np.float32),
        np.arange(clinics),
    )


def frailty_100(clinic, treated, time, observed, clinic_ids):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    shape = numpyro.sample("shape", dist.Gamma(2.0, 2.0))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 5.0))
    effect = numpyro.sample("effect", dist.Normal(0.0, 2.0))
    with numpyro.plate("clinics", clinic_ids.shape[0]):
        frailty = numpyro.sample("frailty", dist.Gamma(2.0, 2.0))
    log_rate = intercept + effect * treated + jnp.log(frailty[clinic])
    # hazard h(t) = shape t^(shape-1) exp(log_rate); log S(t) = -t^shape exp(log_rate)
    log_cumulative = log_rate + shape * jnp.log(time)
    log_hazard = jnp.log(shape) + (shape - 1.0) * jnp.log(time) + log_rate
    numpyro.factor("survival", jnp.sum(observed * log_hazard - jnp.exp(log_cumulative)))


def _negbin_counties(counties=300):
    population = np.exp(_RNG.uniform(np.log(2e3), np.log(2e6), counties))
    x = _RNG.normal(size=(counties, 2))
    effect = 0.3 * _RNG.normal(size=counties)
    mean = population * np.exp(-9.0 + x @ np.array([0.4, -0.2]) + effect)
    concentration = 5.0
    counts = _RNG.negative_binomial(concentration, concentration / (concentration + mean))
    return np.log(population).astype(np.float32), x.astype(np.float32), counts.astype(np.float32)


def negbin_counties(log_population, x, counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    intercept = numpyro.sample("intercept", dist.Normal(0.0, 10.0))
    slopes = numpyro.sample("slopes", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    concentration = numpyro.sample("concentration", dist.Gamma(2.0, 0.1))
    with numpyro.plate("counties", counts.shape[0]):
        effect = numpyro.sample("effect", dist.Normal(0.0, sigma))
        mean = jnp.exp(log_population + intercept + x @ slopes + effect)
        numpyro.sample("counts", dist.NegativeBinomial2(mean, concentration), obs=counts)


MEDIUM_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "radon_slopes", radon_slopes, _radon_slopes(), "radon, varying intercepts and slopes, 85 counties"
        ),
        TextbookModel(
            "logistic_groups_500",
            logistic_groups_500,
            _logistic_groups(),
            "hierarchical logistic regression, 500 groups, 10,930 rows",
        ),
        TextbookModel("ridge_200", ridge_200, _ridge(), "linear regression on 200 correlated predictors"),
        TextbookModel("softmax_10", softmax_10, _softmax(), "multinomial logit, 10 classes, 20 features"),
        TextbookModel("ar1_panel", ar1_panel, _ar1_panel(), "50 latent AR(1) series of 40 steps"),
        TextbookModel(
            "poisson_mf", poisson_mf, _poisson_mf(), "Poisson matrix factorization 200 x 100, rank 10"
        ),
        TextbookModel("lda_marginal", lda_marginal, _lda(), "topic model, assignments summed out, 100 docs"),
        TextbookModel("gp_100", gp_100, _gp(), "GP regression on 100 inputs, non-centred"),
        TextbookModel(
            "frailty_100", frailty_100, _frailty(), "Weibull survival, gamma frailty of 100 clinics"
        ),
        TextbookModel(
            "negbin_counties", negbin_counties, _negbin_counties(), "negative-binomial counts, 300 counties"
        ),
    )
}

"""Nine models from tutorials and case studies (Stan's, NumPyro's, textbooks') not in the other
sets, written in the fifty-seventh session as a user would write them in NumPyro, before
anything was run on them. Published data where short (golf putting, orange trees); simulated
with this module's own seed elsewhere.

* ``golf``: Gelman's golf putting model (Berry 1995's data, 19 distances from 2 to 20 feet,
  Gelman & Nolan 2002): the probability of a putt by the angle a ball must stay within,
  ``2 Phi(asin((R - r) / x) / sigma) - 1``, one scale ``sigma`` (radians, posterior about
  0.027) under ``HalfNormal(1)``.
* ``ar2``: an autoregression of order 2 (NumPyro's ``ar2`` example), 200 points, written
  vectorized: ``y_t ~ Normal(c + a1 y_{t-1} + a2 y_{t-2}, sigma)``.
* ``dawid_skene``: Dawid & Skene's (1979) annotator model with the true classes summed out
  (NumPyro's ``annotation`` example, written with ``logsumexp``): 3 classes, 5 annotators'
  confusion rows (15 Dirichlet simplices) and the class shares, 100 items.
* ``mortality``: an age-period model of death counts (NumPyro's ``mortality`` example,
  smaller): 10 ages x 8 periods, Poisson with exposures, the age and period effects
  ``GaussianRandomWalk`` under half-normal scales.
* ``heckman``: Heckman's (1979) selection model, 300 rows, an outcome seen only where a
  probit selection holds, the correlation ``rho ~ Uniform(-1, 1)``, written with
  ``numpyro.factor``.
* ``lgcp``: a log-Gaussian Cox process on 40 bins of a line, the log intensity a centred
  ``MultivariateNormal`` with a squared-exponential kernel whose amplitude and length scale
  are latent (log-normal priors).
* ``zoib``: a zero-one-inflated beta regression (Ospina & Ferrari 2012), 250 proportions of
  which some are exactly 0 or 1, written with masks and ``numpyro.factor``.
* ``rasch``: the Rasch model (1PL item response), 100 persons x 20 items, the item
  difficulties centred ``Normal(mu_b, sigma_b)``.
* ``orange``: the orange trees' growth (Draper & Smith 1981; R's ``Orange``: 5 trees x 7
  ages), a logistic curve with a random asymptote per tree (Pinheiro & Bates 2000, 8.2).
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["TUTORIAL_MODELS"]

_RNG = np.random.default_rng(57)

# golf putting (Berry 1995, as in Gelman's case study): distance (feet), tries, successes
GOLF_X = np.arange(2.0, 21.0, dtype=np.float32)
GOLF_N = np.array(
    [1443, 694, 455, 353, 272, 256, 240, 217, 200, 237, 202, 192, 174, 167, 201, 195, 191, 147, 152],
    np.float32,
)
GOLF_Y = np.array(
    [1346, 577, 337, 208, 149, 136, 111, 69, 67, 75, 52, 46, 54, 28, 27, 31, 33, 20, 24], np.float32
)


def golf(x, n, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.stats import norm

    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    ball, hole = (1.68 / 2) / 12, (4.25 / 2) / 12  # radii, feet
    threshold = jnp.arcsin((hole - ball) / x)
    p = 2 * norm.cdf(threshold / sigma) - 1
    numpyro.sample("y", dist.Binomial(n, probs=p), obs=y)


def _ar2(length=200, c=0.2, a1=0.6, a2=-0.3, sigma=0.5):
    y = np.zeros(length)
    for t in range(2, length):
        y[t] = c + a1 * y[t - 1] + a2 * y[t - 2] + sigma * _RNG.normal()
    return (y.astype(np.float32),)


def ar2(y):
    import numpyro
    import numpyro.distributions as dist

    c = numpyro.sample("c", dist.Normal(0.0, 1.0))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 1.0))
    a2 = numpyro.sample("a2", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(c + a1 * y[1:-1] + a2 * y[:-2], sigma), obs=y[2:])


def _dawid_skene(items=100, annotators=5, classes=3):
    shares = np.array([0.5, 0.3, 0.2])
    truth = _RNG.choice(classes, size=items, p=shares)
    labels = np.zeros((items, annotators), np.int32)
    for j in range(annotators):
        accuracy = _RNG.uniform(0.6, 0.9)
        confusion = np.full((classes, classes), (1 - accuracy) / (classes - 1))
        np.fill_diagonal(confusion, accuracy)
        for i in range(items):
            labels[i, j] = _RNG.choice(classes, p=confusion[truth[i]])
    return (labels,)


def dawid_skene(labels):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    items, annotators = labels.shape
    classes = 3
    pi = numpyro.sample("pi", dist.Dirichlet(jnp.ones(classes)))
    prior = jnp.ones((classes, classes)) + 2.0 * jnp.eye(classes)  # annotators mostly right
    theta = numpyro.sample("theta", dist.Dirichlet(jnp.broadcast_to(prior, (annotators, classes, classes))))
    # log p(labels_i | class k) = sum_j log theta[j, k, labels_ij]
    log_theta = jnp.log(theta)  # (annotators, true class, label)
    per_item = jnp.stack(
        [jnp.sum(log_theta[jnp.arange(annotators), k, labels], axis=1) for k in range(classes)], axis=1
    )
    numpyro.factor("labels", jnp.sum(logsumexp(jnp.log(pi) + per_item, axis=1)))


def _mortality(ages=10, periods=8):
    age_effect = np.cumsum(_RNG.normal(0.3, 0.1, ages)) - 6.0
    period_effect = np.cumsum(_RNG.normal(-0.05, 0.05, periods))
    exposure = _RNG.uniform(2e4, 8e4, (ages, periods))
    rate = np.exp(age_effect[:, None] + period_effect[None, :])
    deaths = _RNG.poisson(exposure * rate)
    return exposure.astype(np.float32), deaths.astype(np.float32)


def mortality(exposure, deaths):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    ages, periods = deaths.shape
    alpha0 = numpyro.sample("alpha0", dist.Normal(-5.0, 5.0))
    sigma_age = numpyro.sample("sigma_age", dist.HalfNormal(1.0))
    sigma_period = numpyro.sample("sigma_period", dist.HalfNormal(1.0))
    age = numpyro.sample("age", dist.GaussianRandomWalk(scale=sigma_age, num_steps=ages))
    period = numpyro.sample("period", dist.GaussianRandomWalk(scale=sigma_period, num_steps=periods))
    log_rate = alpha0 + age[:, None] + period[None, :]
    numpyro.sample("deaths", dist.Poisson(exposure * jnp.exp(log_rate)), obs=deaths)


def _heckman(rows=300, rho=0.5, sigma=1.0):
    x = np.column_stack([np.ones(rows), _RNG.normal(size=rows)])
    z = np.column_stack([np.ones(rows), _RNG.normal(size=rows), _RNG.normal(size=rows)])
    beta, gamma = np.array([1.0, 0.5]), np.array([0.3, 0.8, -0.6])
    errors = _RNG.multivariate_normal([0, 0], [[sigma**2, rho * sigma], [rho * sigma, 1.0]], size=rows)
    selected = (z @ gamma + errors[:, 1] > 0).astype(np.float32)
    y = np.where(selected > 0, x @ beta + errors[:, 0], 0.0)
    return x.astype(np.float32), z.astype(np.float32), selected, y.astype(np.float32)


def heckman(x, z, selected, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.stats import norm

    beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([x.shape[1]]).to_event(1))
    gamma = numpyro.sample("gamma", dist.Normal(0.0, 5.0).expand([z.shape[1]]).to_event(1))
    rho = numpyro.sample("rho", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    index = z @ gamma
    residual = (y - x @ beta) / sigma
    seen = (
        norm.logpdf(residual) - jnp.log(sigma) + norm.logcdf((index + rho * residual) / jnp.sqrt(1 - rho**2))
    )
    unseen = norm.logcdf(-index)
    numpyro.factor("likelihood", jnp.sum(jnp.where(selected > 0, seen, unseen)))


def _lgcp(bins=40):
    centres = (np.arange(bins) + 0.5) / bins
    intensity = 30.0 * np.exp(np.sin(6.0 * centres))
    counts = _RNG.poisson(intensity / bins)
    return centres.astype(np.float32), counts.astype(np.float32)


def lgcp(centres, counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    bins = centres.shape[0]
    amplitude = numpyro.sample("amplitude", dist.LogNormal(0.0, 1.0))
    length = numpyro.sample("length", dist.LogNormal(-1.5, 0.5))
    mean = numpyro.sample("mean", dist.Normal(0.0, 3.0))
    distance = centres[:, None] - centres[None, :]
    kernel = amplitude**2 * jnp.exp(-0.5 * (distance / length) ** 2) + 1e-4 * jnp.eye(bins)
    f = numpyro.sample("f", dist.MultivariateNormal(mean * jnp.ones(bins), covariance_matrix=kernel))
    numpyro.sample("counts", dist.Poisson(jnp.exp(f) / bins * 30.0), obs=counts)


def _zoib(rows=250):
    x = _RNG.normal(size=rows)
    mu = 1 / (1 + np.exp(-(0.2 + 0.8 * x)))
    phi = 8.0
    y = _RNG.beta(mu * phi, (1 - mu) * phi)
    u = _RNG.uniform(size=rows)
    y = np.where(u < 0.08, 0.0, np.where(u > 0.9, 1.0, y))
    return x.astype(np.float32), y.astype(np.float32)


def zoib(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.nn import log_sigmoid

    a = numpyro.sample("a", dist.Normal(0.0, 2.0))  # the beta part's mean, logit link
    b = numpyro.sample("b", dist.Normal(0.0, 2.0))
    phi = numpyro.sample("phi", dist.Gamma(2.0, 0.1))
    zero = numpyro.sample("zero", dist.Normal(0.0, 2.0))  # logit P(0)
    one = numpyro.sample("one", dist.Normal(0.0, 2.0))  # logit P(1 | not 0)
    mu = jnp.clip(1 / (1 + jnp.exp(-(a + b * x))), 1e-6, 1 - 1e-6)
    inside = jnp.clip(y, 1e-6, 1 - 1e-6)
    beta_part = dist.Beta(mu * phi, (1 - mu) * phi).log_prob(inside)
    log_p = jnp.where(
        y == 0.0,
        log_sigmoid(zero),
        jnp.where(
            y == 1.0,
            log_sigmoid(-zero) + log_sigmoid(one),
            log_sigmoid(-zero) + log_sigmoid(-one) + beta_part,
        ),
    )
    numpyro.factor("y", jnp.sum(log_p))


def _rasch(persons=100, items=20):
    ability = _RNG.normal(size=persons)
    difficulty = _RNG.normal(0.3, 1.0, size=items)
    p = 1 / (1 + np.exp(-(ability[:, None] - difficulty[None, :])))
    return ((_RNG.uniform(size=(persons, items)) < p).astype(np.float32),)


def rasch(responses):
    import numpyro
    import numpyro.distributions as dist

    persons, items = responses.shape
    mu_b = numpyro.sample("mu_b", dist.Normal(0.0, 5.0))
    sigma_b = numpyro.sample("sigma_b", dist.HalfCauchy(1.0))
    with numpyro.plate("items", items):
        difficulty = numpyro.sample("difficulty", dist.Normal(mu_b, sigma_b))
    with numpyro.plate("persons", persons):
        ability = numpyro.sample("ability", dist.Normal(0.0, 1.0))
    logits = ability[:, None] - difficulty[None, :]
    numpyro.sample("responses", dist.Bernoulli(logits=logits), obs=responses)


# R's Orange (Draper & Smith 1981): trunk circumference (mm) of 5 trees at 7 ages (days)
ORANGE_AGE = np.array([118, 484, 664, 1004, 1231, 1372, 1582], np.float32)
ORANGE_CIRCUMFERENCE = np.array(
    [
        [30, 58, 87, 115, 120, 142, 145],
        [33, 69, 111, 156, 172, 203, 203],
        [30, 51, 75, 108, 115, 139, 140],
        [32, 62, 112, 167, 179, 209, 214],
        [30, 49, 81, 125, 142, 174, 177],
    ],
    np.float32,
)


def orange(age, circumference):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    trees = circumference.shape[0]
    asymptote = numpyro.sample("asymptote", dist.Normal(200.0, 100.0))
    midpoint = numpyro.sample("midpoint", dist.Normal(700.0, 300.0))
    scale = numpyro.sample("scale", dist.HalfNormal(500.0))
    sigma_tree = numpyro.sample("sigma_tree", dist.HalfCauchy(30.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(10.0))
    with numpyro.plate("trees", trees):
        u = numpyro.sample("u", dist.Normal(0.0, sigma_tree))
    curve = (asymptote + u[:, None]) / (1 + jnp.exp(-(age[None, :] - midpoint) / scale))
    numpyro.sample("circumference", dist.Normal(curve, sigma), obs=circumference)


TUTORIAL_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel("golf", golf, (GOLF_X, GOLF_N, GOLF_Y), "golf putting by angle, 19 distances (Gelman)"),
        TextbookModel("ar2", ar2, _ar2(), "autoregression of order 2, 200 points (simulated)"),
        TextbookModel(
            "dawid_skene",
            dawid_skene,
            _dawid_skene(),
            "annotators' confusion, classes summed out (simulated)",
        ),
        TextbookModel(
            "mortality", mortality, _mortality(), "age-period Poisson, Gaussian random walks (simulated)"
        ),
        TextbookModel("heckman", heckman, _heckman(), "Heckman selection, 300 rows (simulated)"),
        TextbookModel("lgcp", lgcp, _lgcp(), "log-Gaussian Cox process, 40 bins, latent kernel (simulated)"),
        TextbookModel("zoib", zoib, _zoib(), "zero-one-inflated beta regression, 250 rows (simulated)"),
        TextbookModel("rasch", rasch, _rasch(), "Rasch model, 100 persons x 20 items (simulated)"),
        TextbookModel(
            "orange",
            orange,
            (ORANGE_AGE, ORANGE_CIRCUMFERENCE),
            "orange trees' logistic growth, random asymptotes (Draper & Smith)",
        ),
    )
}

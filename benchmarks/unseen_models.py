"""Six more NumPyro models, written in the twenty-sixth session before anything was measured on
them: the defaults' test on models the project never tuned on (the BUGS examples' published
data, and one simulated ordinal regression).

Each entry of :data:`UNSEEN_MODELS` is a :class:`textbook_models.TextbookModel`:

* ``seeds``: random-effects logistic regression of Crowder (1978)'s seed germination, 21 plates
  (BUGS *Examples* Vol. I, "Seeds"), non-centred plate effects, ``sigma ~ HalfCauchy(1)``.
* ``surgical``: mortality of cardiac surgery in 12 hospitals (BUGS Vol. I, "Surgical"), a
  logit-normal hierarchy, centred as BUGS writes it.
* ``dugongs``: the nonlinear growth curve of 27 dugongs (Ratkowsky 1983; BUGS Vol. II),
  ``y ~ Normal(alpha - beta gamma^x, sigma)`` with ``gamma ~ Uniform(0.5, 1)`` (an interval
  support) and ``alpha, beta ~ LogNormal``.
* ``salmonella``: the dose-response of Salmonella revertant colonies (Breslow 1984; BUGS
  Vol. I), Poisson counts with a log-normal effect per plate, 6 doses x 3 plates.
* ``ordinal``: an ordered-logistic regression (5 categories, 300 rows x 3, simulated), the
  cut points ``ordered_vector`` through an ``OrderedTransform``.
* ``poisson_changepoint``: coal-mining disasters 1851-1962 (Jarrett 1979), a smooth
  change point (a logistic switch between two gamma rates, the switch year ``Uniform(1851,
  1962)``): rates, an interval and a sigmoid in one model.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["UNSEEN_MODELS"]

SEEDS_R = np.array([10, 23, 23, 26, 17, 5, 53, 55, 32, 46, 10, 8, 10, 8, 23, 0, 3, 22, 15, 32, 3], np.float32)
SEEDS_N = np.array(
    [39, 62, 81, 51, 39, 6, 74, 72, 51, 79, 13, 16, 30, 28, 45, 4, 12, 41, 30, 51, 7], np.float32
)
SEEDS_X1 = np.array([0] * 11 + [1] * 10, np.float32)
SEEDS_X2 = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], np.float32)

SURGICAL_N = np.array([47, 148, 119, 810, 211, 196, 148, 215, 207, 97, 256, 360], np.float32)
SURGICAL_R = np.array([0, 18, 8, 46, 8, 13, 9, 31, 14, 8, 29, 24], np.float32)

DUGONG_AGE = np.array(
    [1.0, 1.5, 1.5, 1.5, 2.5, 4.0, 5.0, 5.0, 7.0, 8.0, 8.5, 9.0, 9.5, 9.5, 10.0, 12.0, 12.0, 13.0]
    + [13.0, 14.5, 15.5, 15.5, 16.5, 17.0, 22.5, 29.0, 31.5],
    np.float32,
)
DUGONG_LENGTH = np.array(
    [1.80, 1.85, 1.87, 1.77, 2.02, 2.27, 2.15, 2.26, 2.47, 2.19, 2.26, 2.40, 2.39, 2.41, 2.50, 2.32]
    + [2.32, 2.43, 2.47, 2.56, 2.65, 2.47, 2.64, 2.56, 2.70, 2.72, 2.57],
    np.float32,
)

SALMONELLA_DOSE = np.repeat(np.array([0.0, 10.0, 33.0, 100.0, 333.0, 1000.0], np.float32), 3)
# BUGS's structure(.Data, .Dim = c(6, 3)) fills by row: the three plates of each dose in turn.
SALMONELLA_COLONIES = np.array(
    [15, 21, 29, 16, 18, 21, 16, 26, 33, 27, 41, 60, 33, 38, 41, 20, 27, 42], np.float32
)

# Jarrett (1979), disasters per year 1851-1962 (as in PyMC's and Stan's change-point examples).
COAL_DISASTERS = np.array(
    [4, 5, 4, 0, 1, 4, 3, 4, 0, 6, 3, 3, 4, 0, 2, 6, 3, 3, 5, 4, 5, 3, 1, 4, 4, 1, 5, 5, 3, 4, 2, 5]
    + [2, 2, 3, 4, 2, 1, 3, 2, 2, 1, 1, 1, 1, 3, 0, 0, 1, 0, 1, 1, 0, 0, 3, 1, 0, 3, 2, 2, 0, 1, 1, 1]
    + [0, 1, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 1, 0, 2, 3, 3, 1, 1, 2, 1, 1, 1, 1, 2, 4, 2, 0, 0, 0, 1]
    + [4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1],
    np.float32,
)


def seeds(x1, x2, n, r):
    import numpyro
    import numpyro.distributions as dist

    a0 = numpyro.sample("a0", dist.Normal(0.0, 10.0))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 10.0))
    a2 = numpyro.sample("a2", dist.Normal(0.0, 10.0))
    a12 = numpyro.sample("a12", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(1.0))
    with numpyro.plate("plate", r.shape[0]):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        logit = a0 + a1 * x1 + a2 * x2 + a12 * x1 * x2 + sigma * b
        numpyro.sample("r", dist.Binomial(n.astype("int32"), logits=logit), obs=r)


def surgical(n, r):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    with numpyro.plate("hospital", r.shape[0]):
        logit = numpyro.sample("logit", dist.Normal(mu, tau))
        numpyro.sample("r", dist.Binomial(n.astype("int32"), logits=logit), obs=r)


def dugongs(age, length):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.LogNormal(0.0, 1.0))
    beta = numpyro.sample("beta", dist.LogNormal(0.0, 1.0))
    gamma = numpyro.sample("gamma", dist.Uniform(0.5, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    mean = alpha - beta * jnp.power(gamma, age)
    with numpyro.plate("dugong", age.shape[0]):
        numpyro.sample("length", dist.Normal(mean, sigma), obs=length)


def salmonella(dose, colonies):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0))
    gamma = numpyro.sample("gamma", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("plate", colonies.shape[0]):
        effect = numpyro.sample("effect", dist.Normal(0.0, tau))
        log_rate = alpha + beta * jnp.log(dose + 10.0) + gamma * dose / 1000.0 + effect
        numpyro.sample("colonies", dist.Poisson(jnp.exp(log_rate)), obs=colonies)


def ordinal(x, y):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions.transforms import OrderedTransform

    with numpyro.plate("feature", x.shape[1]):
        w = numpyro.sample("w", dist.Normal(0.0, 2.0))
    cutpoints = numpyro.sample(
        "cutpoints",
        dist.TransformedDistribution(dist.Normal(0.0, 3.0).expand([4]).to_event(1), OrderedTransform()),
    )
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.OrderedLogistic(x @ w, cutpoints), obs=y)


def simulated_ordinal(num_rows=300, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, 3)).astype(np.float32)
    latent = x @ np.array([1.0, -0.5, 0.3]) + rng.logistic(size=num_rows)
    y = np.searchsorted(np.array([-1.5, -0.3, 0.6, 1.8]), latent).astype(np.int32)
    return x, y


def poisson_changepoint(year, disasters):
    import jax
    import numpyro
    import numpyro.distributions as dist

    early = numpyro.sample("early", dist.Gamma(2.0, 0.5))
    late = numpyro.sample("late", dist.Gamma(2.0, 0.5))
    switch = numpyro.sample("switch", dist.Uniform(1851.0, 1962.0))
    weight = jax.nn.sigmoid(year - switch)  # a change over about a year
    with numpyro.plate("year", year.shape[0]):
        numpyro.sample("disasters", dist.Poisson(early * (1.0 - weight) + late * weight), obs=disasters)


UNSEEN_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "seeds",
            seeds,
            (SEEDS_X1, SEEDS_X2, SEEDS_N, SEEDS_R),
            "seed germination, random-effects logistic, 21 plates (BUGS)",
        ),
        TextbookModel(
            "surgical", surgical, (SURGICAL_N, SURGICAL_R), "surgical mortality, 12 hospitals (BUGS)"
        ),
        TextbookModel("dugongs", dugongs, (DUGONG_AGE, DUGONG_LENGTH), "dugong growth curve, 27 (BUGS)"),
        TextbookModel(
            "salmonella",
            salmonella,
            (SALMONELLA_DOSE, SALMONELLA_COLONIES),
            "Salmonella dose-response, Poisson-log-normal, 18 plates (BUGS)",
        ),
        TextbookModel(
            "ordinal", ordinal, simulated_ordinal(), "ordered logistic, 5 levels, 300 x 3 (simulated)"
        ),
        TextbookModel(
            "poisson_changepoint",
            poisson_changepoint,
            (np.arange(1851, 1851 + COAL_DISASTERS.size, dtype=np.float32), COAL_DISASTERS),
            "coal-mining disasters 1851-1962, smooth change point",
        ),
    )
}

assert COAL_DISASTERS.size == 112 and SEEDS_R.size == SEEDS_N.size == 21

"""Six models whose data sit on their raw scales, written in the sixty-third session as users
write them (no standardizing), before anything was run on them: the units a start of ``q``'s
scale 1 at 0 is far from.

* ``house_prices``: a sale price (about 3e5 dollars) against the floor area (800-4,000 square
  feet), ``price ~ Normal(a + b area, sigma)``, vague normal priors in dollars.
* ``year_trend``: yearly counts against the calendar year itself (1990-2020), ``y ~
  Poisson(exp(a + b year))``: intercept and slope correlated at about -0.9999.
* ``far_location``: 25 measurements near 1,000 (a boiling point in kelvin, say) with a vague
  ``Normal(0, 1e4)`` prior on their mean: the posterior sd of the mean is 0.4.
* ``large_counts``: counts of about 20,000 in each of 10 regions, their log rates from a normal
  hierarchy: posterior sd of each log rate about 0.007.
* ``big_polls``: 12 polls of 40,000-200,000 respondents each, a hierarchy on the logit of the
  share: posterior sd of each logit about 0.006.
* ``micro_scale``: cell diameters in metres (about 5e-6) against a treatment indicator, standard
  normal priors: the noise sd is 1e-6, 14 log units below the prior's.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["SCALE_MODELS"]

_RNG = np.random.default_rng(63)


def _house_prices(n=60):
    area = _RNG.uniform(800.0, 4000.0, n)
    price = 50_000.0 + 120.0 * area + _RNG.normal(0.0, 40_000.0, n)
    return area.astype(np.float32), price.astype(np.float32)


def house_prices(area, price):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 1e6))
    b = numpyro.sample("b", dist.Normal(0.0, 1e3))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1e5))
    with numpyro.plate("sales", area.shape[0]):
        numpyro.sample("price", dist.Normal(a + b * area, sigma), obs=price)


def _year_trend():
    year = np.arange(1990, 2021).astype(np.float64)
    counts = _RNG.poisson(np.exp(3.0 + 0.04 * (year - 1990)))
    return year.astype(np.float32), counts.astype(np.float32)


def year_trend(year, counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 100.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("years", year.shape[0]):
        numpyro.sample("counts", dist.Poisson(jnp.exp(a + b * year)), obs=counts)


def _far_location(n=25):
    return (1000.0 + _RNG.normal(0.0, 2.0, n)).astype(np.float32)


def far_location(y):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 1e4))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(10.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _large_counts(regions=10):
    log_rate = np.log(20_000.0) + _RNG.normal(0.0, 0.3, regions)
    return _RNG.poisson(np.exp(log_rate)).astype(np.float32)


def large_counts(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("regions", y.shape[0]):
        log_rate = numpyro.sample("log_rate", dist.Normal(mu, tau))
        numpyro.sample("y", dist.Poisson(jnp.exp(log_rate)), obs=y)


def _big_polls(polls=12):
    n = _RNG.integers(40_000, 200_000, polls)
    share = 1.0 / (1.0 + np.exp(-(0.1 + _RNG.normal(0.0, 0.05, polls))))
    return n.astype(np.float32), _RNG.binomial(n, share).astype(np.float32)


def big_polls(n, k):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 1.5))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("polls", n.shape[0]):
        logit = numpyro.sample("logit", dist.Normal(mu, tau))
        numpyro.sample("k", dist.Binomial(n, logits=logit), obs=k)


def _micro_scale(n=40):
    treated = (np.arange(n) % 2).astype(np.float64)
    diameter = 5e-6 + 0.8e-6 * treated + _RNG.normal(0.0, 1e-6, n)
    return treated.astype(np.float32), diameter.astype(np.float32)


def micro_scale(treated, diameter):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("cells", treated.shape[0]):
        numpyro.sample("diameter", dist.Normal(a + b * treated, sigma), obs=diameter)


SCALE_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "house_prices", house_prices, _house_prices(), "sale price against floor area, in dollars"
        ),
        TextbookModel(
            "year_trend", year_trend, _year_trend(), "Poisson counts against the raw calendar year"
        ),
        TextbookModel(
            "far_location", far_location, (_far_location(),), "25 measurements near 1,000, vague prior"
        ),
        TextbookModel("large_counts", large_counts, (_large_counts(),), "counts near 20,000 in 10 regions"),
        TextbookModel("big_polls", big_polls, _big_polls(), "12 polls of 40,000-200,000, logit hierarchy"),
        TextbookModel("micro_scale", micro_scale, _micro_scale(), "cell diameters in metres (5e-6)"),
    )
}

"""Six models whose positive latents lie on a ridge (a product or a ratio the data fix), written
in the sixty-first session as their fields write them, before anything was run on them: the
kind of model whose coupling decisions the session changed (``docs/optimization.md``), none of
them among the models those decisions were measured on.

* ``scaled_rates``: Poisson counts at a known exposure with the rate a product of two positive
  factors, ``y ~ Poisson(a b x)`` (a detection probability times an abundance, a gain times a
  flux): only ``a b`` is identified, its split by the priors.
* ``puromycin``: Michaelis-Menten kinetics of the treated cells of Treloar's (1974) Puromycin
  data (R's ``datasets::Puromycin``), ``rate ~ Normal(Vmax c / (K + c), sigma)``, log-normal
  priors on ``Vmax`` and ``K``.
* ``beverton_holt``: a stock-recruitment curve, ``R ~ LogNormal(log(alpha S / (1 + beta S)),
  sigma)``, 25 years of spawners and recruits (simulated): ``alpha`` and ``beta`` correlated.
* ``one_compartment``: a one-compartment pharmacokinetic model after an intravenous dose,
  ``C(t) = D / V exp(-CL / V t)`` with log-normal errors, clearance and volume log-normal (12
  samples of one subject, simulated).
* ``site_gp_poisson``: counts at 12 sites with a Gaussian process over their distances (centred)
  and a mean rate ``a / g`` times each site's effort: ``a`` and ``g`` enter only as their ratio.
* ``gamma_frailty``: clustered exponential survival times with a gamma frailty of mean 1 per
  cluster and a baseline hazard (30 clusters of 4, simulated): the frailties' variance against
  the baseline.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["RIDGE_MODELS"]

_RNG = np.random.default_rng(61)


def _scaled_rates(n=20):
    exposure = _RNG.uniform(0.5, 3.0, n)
    return exposure.astype(np.float32), _RNG.poisson(0.6 * 8.0 * exposure).astype(np.float32)


def scaled_rates(exposure, y):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Gamma(2.0, 2.0))
    b = numpyro.sample("b", dist.Exponential(0.1))
    with numpyro.plate("counts", y.shape[0]):
        numpyro.sample("y", dist.Poisson(a * b * exposure), obs=y)


# Treloar (1974), R's datasets::Puromycin, treated cells: substrate concentration (ppm), rate
PUROMYCIN_CONC = np.array(
    [0.02, 0.02, 0.06, 0.06, 0.11, 0.11, 0.22, 0.22, 0.56, 0.56, 1.10, 1.10], np.float32
)
PUROMYCIN_RATE = np.array([76, 47, 97, 107, 123, 139, 159, 152, 191, 201, 207, 200], np.float32)


def puromycin(conc, rate):
    import numpyro
    import numpyro.distributions as dist

    vmax = numpyro.sample("vmax", dist.LogNormal(np.log(200.0), 1.0))
    k = numpyro.sample("k", dist.LogNormal(np.log(0.1), 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("data", rate.shape[0]):
        numpyro.sample("rate", dist.Normal(vmax * conc / (k + conc), sigma), obs=rate)


def _beverton_holt(years=25):
    spawners = _RNG.uniform(100.0, 2000.0, years)
    mean = 4.0 * spawners / (1.0 + 0.002 * spawners)
    recruits = mean * np.exp(_RNG.normal(0.0, 0.3, years))
    return spawners.astype(np.float32), recruits.astype(np.float32)


def beverton_holt(spawners, recruits):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.LogNormal(1.0, 1.0))
    beta = numpyro.sample("beta", dist.LogNormal(np.log(0.001), 1.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    mean = jnp.log(alpha * spawners / (1.0 + beta * spawners))
    with numpyro.plate("years", recruits.shape[0]):
        numpyro.sample("recruits", dist.LogNormal(mean, sigma), obs=recruits)


def _one_compartment():
    times = np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0])
    clearance, volume, dose = 5.0, 40.0, 500.0
    conc = dose / volume * np.exp(-clearance / volume * times) * np.exp(_RNG.normal(0.0, 0.15, times.size))
    return times.astype(np.float32), conc.astype(np.float32)


def one_compartment(times, conc):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    clearance = numpyro.sample("clearance", dist.LogNormal(np.log(4.0), 0.5))
    volume = numpyro.sample("volume", dist.LogNormal(np.log(30.0), 0.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    mean = jnp.log(500.0 / volume) - clearance / volume * times
    with numpyro.plate("samples", conc.shape[0]):
        numpyro.sample("conc", dist.LogNormal(mean, sigma), obs=conc)


def _site_gp_poisson(sites=12):
    xy = _RNG.uniform(0.0, 3.0, (sites, 2))
    distances = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
    effort = _RNG.uniform(1.0, 10.0, sites)
    kernel = 0.3 * np.exp(-0.5 * distances**2) + 0.01 * np.eye(sites)
    effect = _RNG.multivariate_normal(np.zeros(sites), kernel)
    counts = _RNG.poisson(2.0 * effort * np.exp(effect))
    return distances.astype(np.float32), effort.astype(np.float32), counts.astype(np.float32)


def site_gp_poisson(distances, effort, counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    etasq = numpyro.sample("etasq", dist.Exponential(2.0))
    rhosq = numpyro.sample("rhosq", dist.Exponential(0.5))
    n = counts.shape[0]
    kernel = etasq * jnp.exp(-rhosq * distances**2) + 0.01 * jnp.eye(n)
    k = numpyro.sample("k", dist.MultivariateNormal(jnp.zeros(n), covariance_matrix=kernel))
    a = numpyro.sample("a", dist.Exponential(1.0))
    g = numpyro.sample("g", dist.Exponential(1.0))
    with numpyro.plate("sites", n):
        numpyro.sample("counts", dist.Poisson(a / g * effort * jnp.exp(k)), obs=counts)


def _gamma_frailty(clusters=30, size=4):
    frailty = _RNG.gamma(2.0, 0.5, clusters)
    times = _RNG.exponential(1.0 / (0.3 * np.repeat(frailty, size)))
    return np.repeat(np.arange(clusters), size).astype(np.int32), times.astype(np.float32)


def gamma_frailty(cluster, times):
    import numpyro
    import numpyro.distributions as dist

    hazard = numpyro.sample("hazard", dist.Gamma(1.0, 1.0))
    theta = numpyro.sample("theta", dist.Exponential(1.0))  # the frailties' variance
    with numpyro.plate("clusters", 30):
        frailty = numpyro.sample("frailty", dist.Gamma(1.0 / theta, 1.0 / theta))
    with numpyro.plate("subjects", times.shape[0]):
        numpyro.sample("times", dist.Exponential(hazard * frailty[cluster]), obs=times)


RIDGE_MODELS = {
    model.name: model
    for model in (
        TextbookModel("scaled_rates", scaled_rates, _scaled_rates(), "Poisson at a rate a b x (simulated)"),
        TextbookModel(
            "puromycin",
            puromycin,
            (PUROMYCIN_CONC, PUROMYCIN_RATE),
            "Michaelis-Menten, Puromycin's treated cells (Treloar 1974)",
        ),
        TextbookModel(
            "beverton_holt", beverton_holt, _beverton_holt(), "stock-recruitment, 25 years (simulated)"
        ),
        TextbookModel(
            "one_compartment",
            one_compartment,
            _one_compartment(),
            "one-compartment PK, 12 samples (simulated)",
        ),
        TextbookModel(
            "site_gp_poisson",
            site_gp_poisson,
            _site_gp_poisson(),
            "counts at 12 sites, a GP and a / g (simulated)",
        ),
        TextbookModel(
            "gamma_frailty", gamma_frailty, _gamma_frailty(), "gamma frailty, 30 clusters of 4 (simulated)"
        ),
    )
}

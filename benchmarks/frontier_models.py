"""Twelve NumPyro models written in the fiftieth session without reading or running grepvi, as an
outside user would write them, of kinds no other benchmark set has: a Tobit regression (left
censoring by ``jnp.where`` and ``norm.logcdf``), numpyro's own ``HurdlePoisson``, Bradley-Terry
paired comparisons, a Dirichlet regression on observed compositions, a truncated stick-breaking
Dirichlet-process mixture (``MixtureSameFamily``), an SIR epidemic by Euler steps in
``lax.scan``, a site-occupancy model whose latent occupancy is summed out by hand
(``logaddexp``), Poisson rates under fixed Gamma(0.1, 0.1) priors (posteriors of shape near 0.1
for the units that never count), an inverse-Gaussian regression written as a factor, a
stochastic-frontier model (normal minus half-normal composed error), a seasonal Poisson series
(Fourier terms and a random-walk level) and a three-level hierarchy of beta probabilities.
Simulated data from known parameters, seed 50.

``python benchmarks/time_to_answer.py --frontier`` runs them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.stats import norm
from textbook_models import TextbookModel

__all__ = ["FRONTIER_MODELS"]

rng = np.random.default_rng(50)

# 1. Tobit regression: y = max(0, 1 + 1.5 x1 - 0.8 x2 + N(0, 1)), about a third at the floor
X1 = rng.normal(size=(150, 2)).astype(np.float32)
Y1 = np.maximum(0.0, 1.0 + X1 @ np.array([1.5, -0.8]) + rng.normal(0, 1.0, 150)).astype(np.float32)


def tobit(x, y):
    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 2.5).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    mu = b0 + x @ b
    log_lik = jnp.where(y <= 0.0, norm.logcdf(-mu / sigma), norm.logpdf(y, mu, sigma))
    numpyro.factor("y", log_lik.sum())


# 2. hurdle Poisson: the zero's probability and the positive counts' rate both on a covariate
X2 = rng.normal(size=200).astype(np.float32)
_GATE2 = 1 / (1 + np.exp(-(-0.5 + 1.0 * X2)))
_RATE2 = np.exp(0.8 + 0.5 * X2)
_Y2 = []
for g, r in zip(_GATE2, _RATE2, strict=True):
    draw = 0
    if rng.uniform() >= g:
        while draw == 0:
            draw = rng.poisson(r)
    _Y2.append(draw)
Y2 = np.asarray(_Y2, np.int32)


def hurdle_poisson(x, y):
    a0 = numpyro.sample("a0", dist.Normal(0.0, 2.0))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 2.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 2.0))
    with numpyro.plate("n", x.shape[0]):
        gate = jax.nn.sigmoid(a0 + a1 * x)
        numpyro.sample("y", dist.HurdlePoisson(gate, jnp.exp(b0 + b1 * x)), obs=y)


# 3. Bradley-Terry: 10 teams, each pair meets four times (180 games), a home advantage
_TEAMS3 = 10
_STRENGTH3 = np.array([1.2, 0.8, 0.5, 0.3, 0.0, -0.1, -0.4, -0.6, -0.8, -0.9])
_PAIRS3 = [(i, j) for i in range(_TEAMS3) for j in range(i + 1, _TEAMS3)]
HOME3 = np.array([p[k % 2] for p in _PAIRS3 for k in range(4)], np.int32)
AWAY3 = np.array([p[1 - k % 2] for p in _PAIRS3 for k in range(4)], np.int32)
_P3 = 1 / (1 + np.exp(-(0.3 + _STRENGTH3[HOME3] - _STRENGTH3[AWAY3])))
Y3 = (rng.uniform(size=HOME3.size) < _P3).astype(np.int32)


def bradley_terry(home, away, home_won):
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    advantage = numpyro.sample("home_advantage", dist.Normal(0.0, 1.0))
    with numpyro.plate("teams", _TEAMS3):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    strength = numpyro.deterministic("strength", sigma * z)
    with numpyro.plate("games", home.shape[0]):
        logits = advantage + strength[home] - strength[away]
        numpyro.sample("home_won", dist.Bernoulli(logits=logits), obs=home_won)


# 4. Dirichlet regression: three-part compositions, softmax mean on a covariate (the first part
#    the reference), a concentration
X4 = rng.normal(size=100).astype(np.float32)
_LOGITS4 = np.stack([np.zeros(100), 0.5 + 1.0 * X4, -0.3 - 0.5 * X4], axis=1)
_MEAN4 = np.exp(_LOGITS4) / np.exp(_LOGITS4).sum(1, keepdims=True)
_Y4 = np.array([rng.dirichlet(20.0 * m) for m in _MEAN4])
_Y4 = np.clip(_Y4, 1e-4, None)
Y4 = (_Y4 / _Y4.sum(1, keepdims=True)).astype(np.float32)


def dirichlet_regression(x, y):
    a = numpyro.sample("a", dist.Normal(0.0, 2.0).expand([y.shape[1] - 1]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([y.shape[1] - 1]).to_event(1))
    phi = numpyro.sample("phi", dist.Gamma(2.0, 0.1))
    logits = jnp.concatenate([jnp.zeros((x.shape[0], 1)), a + x[:, None] * b], axis=1)
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Dirichlet(phi * jax.nn.softmax(logits, axis=-1)), obs=y)


# 5. a truncated stick-breaking Dirichlet-process mixture of normals, 8 sticks, on 200 points from
#    three clusters (-4, 0, 3.5; weights 0.5, 0.3, 0.2). Multimodal: past the first stick the
#    components swap and split clusters, so their means and scales are not identified (NUTS's
#    one chain moves between such modes: n_eff near 10)
_K5 = 8
_Z5 = rng.choice(3, size=200, p=[0.5, 0.3, 0.2])
Y5 = (np.array([-4.0, 0.0, 3.5])[_Z5] + rng.normal(0, 0.7, 200)).astype(np.float32)


def dp_mixture(y):
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
    with numpyro.plate("sticks", _K5 - 1):
        v = numpyro.sample("v", dist.Beta(1.0, alpha))
    one = jnp.ones(1)
    weights = jnp.concatenate([v, one]) * jnp.concatenate([one, jnp.cumprod(1.0 - v)])
    with numpyro.plate("components", _K5):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("n", y.shape[0]):
        mixture = dist.MixtureSameFamily(dist.Categorical(probs=weights), dist.Normal(mu, sigma))
        numpyro.sample("y", mixture, obs=y)


# 6. an SIR epidemic in a town of 2,000 by daily steps (each day's infection and recovery
#    probabilities 1 - exp(-hazard), so that no parameter drives a compartment negative),
#    negative-binomial daily cases
_POP6 = 2000.0
_DAYS6 = 50


def _sir_incidence(beta, gamma, i0, days, population, xp):
    s, i = population - i0, i0
    out = []
    for _ in range(days):
        new = -s * xp.expm1(-beta * i / population)
        s, i = s - new, i + new + i * xp.expm1(-gamma)
        out.append(new)
    return xp.stack(out)


_INCIDENCE6 = _sir_incidence(0.6, 0.25, 3.0, _DAYS6, _POP6, np)
Y6 = rng.negative_binomial(20.0, 20.0 / (20.0 + _INCIDENCE6)).astype(np.int32)


def sir_epidemic(cases):
    beta = numpyro.sample("beta", dist.LogNormal(jnp.log(0.4), 0.5))
    gamma = numpyro.sample("gamma", dist.LogNormal(jnp.log(0.2), 0.5))
    i0 = numpyro.sample("i0", dist.LogNormal(jnp.log(5.0), 1.0))
    phi = numpyro.sample("phi", dist.Exponential(0.05))

    def step(state, _):
        s, i = state
        new = -s * jnp.expm1(-beta * i / _POP6)
        return (s - new, i + new + i * jnp.expm1(-gamma)), new

    _, incidence = jax.lax.scan(step, (_POP6 - i0, i0), None, length=cases.shape[0])
    with numpyro.plate("days", cases.shape[0]):
        numpyro.sample("cases", dist.NegativeBinomial2(incidence + 1e-3, phi), obs=cases)


# 7. site occupancy (MacKenzie et al. 2002): 60 sites, 5 visits; occupancy on forest cover,
#    detection on wind; the occupancy state summed out by hand
FOREST7 = rng.normal(size=60).astype(np.float32)
WIND7 = rng.normal(size=(60, 5)).astype(np.float32)
_OCC7 = rng.uniform(size=60) < 1 / (1 + np.exp(-(0.3 + 1.0 * FOREST7)))
_DET7 = rng.uniform(size=(60, 5)) < 1 / (1 + np.exp(-(-0.4 + 0.8 * WIND7)))
Y7 = (_OCC7[:, None] & _DET7).astype(np.int32)


def occupancy(forest, wind, y):
    a0 = numpyro.sample("a0", dist.Normal(0.0, 2.0))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 2.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 2.0))
    occupancy_logit = a0 + a1 * forest
    detection_logit = b0 + b1 * wind
    log_detections = dist.Bernoulli(logits=detection_logit).log_prob(y).sum(-1)
    occupied = jax.nn.log_sigmoid(occupancy_logit) + log_detections
    empty = jax.nn.log_sigmoid(-occupancy_logit)
    seen = y.sum(-1) > 0
    numpyro.factor("y", jnp.where(seen, occupied, jnp.logaddexp(occupied, empty)).sum())


# 8. Poisson rates of 30 units under a fixed Gamma(0.1, 0.1) prior (the true rates drawn from it:
#    most near zero), 4 rows a unit with exposures and a shared covariate effect
_UNITS8 = 30
_LAM8 = rng.gamma(0.1, 1 / 0.1, _UNITS8)
UNIT8 = np.repeat(np.arange(_UNITS8), 4).astype(np.int32)
EXPOSURE8 = rng.uniform(0.5, 5.0, UNIT8.size).astype(np.float32)
X8 = rng.normal(size=UNIT8.size).astype(np.float32)
Y8 = rng.poisson(_LAM8[UNIT8] * EXPOSURE8 * np.exp(0.4 * X8)).astype(np.int32)


def sparse_gamma_rates(unit, exposure, x, y):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("units", _UNITS8):
        lam = numpyro.sample("lam", dist.Gamma(0.1, 0.1))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Poisson(lam[unit] * exposure * jnp.exp(b * x)), obs=y)


# 9. inverse-Gaussian regression, log link, unknown shape (numpyro has no InverseGaussian: the
#    density by hand)
X9 = rng.normal(size=(150, 2)).astype(np.float32)
_MU9 = np.exp(0.5 + X9 @ np.array([0.4, -0.3]))
Y9 = rng.wald(_MU9, 5.0).astype(np.float32)


def inverse_gaussian_regression(x, y):
    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    shape = numpyro.sample("shape", dist.Gamma(2.0, 0.2))
    mu = jnp.exp(b0 + x @ b)
    log_lik = 0.5 * jnp.log(shape / (2 * jnp.pi * y**3)) - shape * (y - mu) ** 2 / (2 * mu**2 * y)
    numpyro.factor("y", log_lik.sum())


# 10. a stochastic production frontier (Aigner, Lovell & Schmidt 1977): log output
#     y = 1 + 0.6 x1 + 0.3 x2 + v - u, v ~ Normal(0, 0.2), u ~ HalfNormal(0.4), u summed out
X10 = rng.normal(size=(200, 2)).astype(np.float32)
Y10 = (1.0 + X10 @ np.array([0.6, 0.3]) + rng.normal(0, 0.2, 200) - np.abs(rng.normal(0, 0.4, 200))).astype(
    np.float32
)


def stochastic_frontier(x, y):
    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([x.shape[1]]).to_event(1))
    sigma_v = numpyro.sample("sigma_v", dist.HalfNormal(1.0))
    sigma_u = numpyro.sample("sigma_u", dist.HalfNormal(1.0))
    eps = y - b0 - x @ b
    sigma = jnp.sqrt(sigma_v**2 + sigma_u**2)
    log_lik = jnp.log(2.0) + norm.logpdf(eps, 0.0, sigma) + norm.logcdf(-eps * sigma_u / (sigma_v * sigma))
    numpyro.factor("y", log_lik.sum())


# 11. monthly counts over four years: a random-walk log level (non-centred) and two yearly
#     Fourier harmonics
_MONTHS11 = 48
_T11 = np.arange(_MONTHS11)
FOURIER11 = np.stack([f(2 * np.pi * k * _T11 / 12) for k in (1, 2) for f in (np.cos, np.sin)], axis=1).astype(
    np.float32
)
_LEVEL11 = np.log(20.0) + np.concatenate([[0.0], np.cumsum(rng.normal(0, 0.08, _MONTHS11 - 1))])
Y11 = rng.poisson(np.exp(_LEVEL11 + FOURIER11 @ np.array([0.4, -0.2, 0.1, 0.15]))).astype(np.int32)


def seasonal_poisson(fourier, y):
    level0 = numpyro.sample("level0", dist.Normal(3.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.2))
    coef = numpyro.sample("coef", dist.Normal(0.0, 1.0).expand([fourier.shape[1]]).to_event(1))
    with numpyro.plate("steps", y.shape[0] - 1):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    level = level0 + jnp.concatenate([jnp.zeros(1), jnp.cumsum(sigma * z)])
    with numpyro.plate("months", y.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(level + fourier @ coef)), obs=y)


# 12. three nested levels of beta probabilities: 3 regions, 3 districts each, 4 clinics each,
#     binomial outcomes per clinic
DISTRICT_REGION12 = np.repeat(np.arange(3), 3).astype(np.int32)
CLINIC_DISTRICT12 = np.repeat(np.arange(9), 4).astype(np.int32)
_P_REGION12 = rng.beta(0.3 * 30, 0.7 * 30, 3)
_P_DISTRICT12 = rng.beta(_P_REGION12[DISTRICT_REGION12] * 60, (1 - _P_REGION12[DISTRICT_REGION12]) * 60)
_P_CLINIC12 = rng.beta(_P_DISTRICT12[CLINIC_DISTRICT12] * 100, (1 - _P_DISTRICT12[CLINIC_DISTRICT12]) * 100)
N12 = rng.integers(20, 80, 36).astype(np.int32)
Y12 = rng.binomial(N12, _P_CLINIC12).astype(np.int32)


def nested_beta(district_region, clinic_district, trials, successes):
    mu = numpyro.sample("mu", dist.Beta(2.0, 2.0))
    kappa_region = numpyro.sample("kappa_region", dist.Gamma(2.0, 0.05))
    kappa_district = numpyro.sample("kappa_district", dist.Gamma(2.0, 0.05))
    kappa_clinic = numpyro.sample("kappa_clinic", dist.Gamma(2.0, 0.05))
    with numpyro.plate("regions", 3):
        p_region = numpyro.sample("p_region", dist.Beta(mu * kappa_region, (1 - mu) * kappa_region))
    with numpyro.plate("districts", district_region.shape[0]):
        parent = p_region[district_region]
        p_district = numpyro.sample(
            "p_district", dist.Beta(parent * kappa_district, (1 - parent) * kappa_district)
        )
    with numpyro.plate("clinics", clinic_district.shape[0]):
        parent = p_district[clinic_district]
        p_clinic = numpyro.sample("p_clinic", dist.Beta(parent * kappa_clinic, (1 - parent) * kappa_clinic))
        numpyro.sample("y", dist.Binomial(trials, probs=p_clinic), obs=successes)


FRONTIER_MODELS = {
    "tobit": TextbookModel(
        "tobit", tobit, (X1, Y1), "Tobit regression, left-censored at 0, 150 x 2 (simulated)"
    ),
    "hurdle_poisson": TextbookModel(
        "hurdle_poisson", hurdle_poisson, (X2, Y2), "dist.HurdlePoisson regression, 200 (simulated)"
    ),
    "bradley_terry": TextbookModel(
        "bradley_terry",
        bradley_terry,
        (HOME3, AWAY3, Y3),
        "Bradley-Terry, 10 teams, home advantage, 180 games (simulated)",
    ),
    "dirichlet_regression": TextbookModel(
        "dirichlet_regression",
        dirichlet_regression,
        (X4, Y4),
        "Dirichlet regression on 3-part compositions, 100 (simulated)",
    ),
    "dp_mixture": TextbookModel(
        "dp_mixture", dp_mixture, (Y5,), "stick-breaking DP mixture of normals, 8 sticks, 200 (simulated)"
    ),
    "sir_epidemic": TextbookModel(
        "sir_epidemic", sir_epidemic, (Y6,), "SIR by Euler steps in lax.scan, NB cases, 50 days (simulated)"
    ),
    "occupancy": TextbookModel(
        "occupancy",
        occupancy,
        (FOREST7, WIND7, Y7),
        "site occupancy, state summed out by hand, 60 x 5 (simulated)",
    ),
    "sparse_gamma_rates": TextbookModel(
        "sparse_gamma_rates",
        sparse_gamma_rates,
        (UNIT8, EXPOSURE8, X8, Y8),
        "Poisson rates under Gamma(0.1, 0.1), 30 units x 4 (simulated)",
    ),
    "inverse_gaussian_regression": TextbookModel(
        "inverse_gaussian_regression",
        inverse_gaussian_regression,
        (X9, Y9),
        "inverse-Gaussian regression by a factor, log link, 150 x 2 (simulated)",
    ),
    "stochastic_frontier": TextbookModel(
        "stochastic_frontier",
        stochastic_frontier,
        (X10, Y10),
        "stochastic frontier, normal minus half-normal error, 200 x 2 (simulated)",
    ),
    "seasonal_poisson": TextbookModel(
        "seasonal_poisson",
        seasonal_poisson,
        (FOURIER11, Y11),
        "Poisson, random-walk level and Fourier seasonality, 48 months (simulated)",
    ),
    "nested_beta": TextbookModel(
        "nested_beta",
        nested_beta,
        (DISTRICT_REGION12, CLINIC_DISTRICT12, N12, Y12),
        "three nested levels of beta probabilities, 36 clinics (simulated)",
    ),
}

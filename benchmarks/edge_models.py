"""Ten NumPyro models written in the forty-ninth session, before grepvi was run on them: NumPyro
features no other benchmark set used (``dist.CAR`` and ``dist.Wishart`` latents, ``Gompertz``
survival, ``numpyro.contrib.control_flow.scan`` with a latent inside the step, a
``GaussianRandomWalk`` of regression coefficients), users' patterns that strain ``q`` (a
support that depends on a latent, written as ``numpyro.factor(..., -inf)``; a zero-truncated
Poisson's ``log1p(-exp(-rate))``; a beta posterior against its boundary, whose exact answer is
known) and two hard classics (an Emax dose-response curve, a regularized horseshoe logistic
regression). Simulated data, seed 49.

``python benchmarks/time_to_answer.py --edges`` runs them.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.control_flow import scan
from textbook_models import TextbookModel

__all__ = ["EDGE_MODELS"]

rng = np.random.default_rng(49)

# 1. a CAR latent (numpyro's own distribution) on a 6 x 5 lattice, Poisson counts
_SIDE_A, _SIDE_B = 6, 5
_AREAS = _SIDE_A * _SIDE_B
ADJ1 = np.zeros((_AREAS, _AREAS), np.float32)
for i in range(_SIDE_A):
    for j in range(_SIDE_B):
        k = i * _SIDE_B + j
        if i + 1 < _SIDE_A:
            ADJ1[k, k + _SIDE_B] = ADJ1[k + _SIDE_B, k] = 1.0
        if j + 1 < _SIDE_B:
            ADJ1[k, k + 1] = ADJ1[k + 1, k] = 1.0
E1 = rng.uniform(5.0, 20.0, _AREAS).astype(np.float32)
_FIELD1 = np.cumsum(rng.normal(0, 0.3, _AREAS))
_FIELD1 = (_FIELD1 - _FIELD1.mean()).astype(np.float32)
Y1 = rng.poisson(E1 * np.exp(0.1 + _FIELD1)).astype(np.int32)


def car_latent(expected, adjacency, y):
    beta0 = numpyro.sample("beta0", dist.Normal(0.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Uniform(0.0, 0.99))
    tau = numpyro.sample("tau", dist.Gamma(2.0, 0.5))
    phi = numpyro.sample("phi", dist.CAR(0.0, alpha, tau, adjacency))
    with numpyro.plate("areas", y.shape[0]):
        numpyro.sample("y", dist.Poisson(expected * jnp.exp(beta0 + phi)), obs=y)


# 2. a Wishart precision matrix and a mean, three-dimensional normal data
_COV2 = np.array([[1.0, 0.6, 0.2], [0.6, 1.5, -0.3], [0.2, -0.3, 0.8]])
Y2 = rng.multivariate_normal([1.0, -0.5, 0.0], _COV2, size=60).astype(np.float32)


def wishart_precision(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0).expand([y.shape[1]]).to_event(1))
    precision = numpyro.sample("precision", dist.Wishart(y.shape[1] + 2.0, scale_matrix=jnp.eye(y.shape[1])))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(mu, precision_matrix=precision), obs=y)


# 3. uniform data on (0, theta): the support written as a factor, as users write it
Y3 = rng.uniform(0.0, 8.0, size=15).astype(np.float32)


def uniform_support_factor(y):
    theta = numpyro.sample("theta", dist.Pareto(1.0, 0.5))
    numpyro.factor("support", jnp.where(theta > jnp.max(y), 0.0, -jnp.inf))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Uniform(0.0, theta), obs=y)


# 4. Gompertz survival times with a covariate on the rate
X4 = rng.normal(size=120).astype(np.float32)
_RATE4 = 0.2 * np.exp(0.5 * X4)
_U4 = rng.uniform(size=120)
Y4 = (np.log1p(-np.log(_U4) / 0.8) / _RATE4).astype(np.float32)  # the inverse CDF, concentration 0.8


def gompertz_survival(x, t):
    concentration = numpyro.sample("concentration", dist.LogNormal(0.0, 1.0))
    log_rate = numpyro.sample("log_rate", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("t", dist.Gompertz(concentration, jnp.exp(log_rate + b * x)), obs=t)


# 5. a success probability against its boundary: 0 of 12 and 12 of 12 (exact: Beta(0.5, 12.5)
#    and Beta(12.5, 0.5))
N5 = np.array([12, 12], np.int32)
Y5 = np.array([0, 12], np.int32)


def beta_boundary(trials, successes):
    with numpyro.plate("groups", trials.shape[0]):
        p = numpyro.sample("p", dist.Beta(0.5, 0.5))
        numpyro.sample("y", dist.Binomial(trials, probs=p), obs=successes)


# 6. Emax dose-response: E0 + Emax d^h / (ED50^h + d^h), normal noise
D6 = np.repeat(np.array([0.0, 1.0, 3.0, 10.0, 30.0, 100.0], np.float32), 8)
_MEAN6 = 2.0 + 8.0 * D6**1.3 / (12.0**1.3 + D6**1.3)
Y6 = (_MEAN6 + rng.normal(0, 1.0, D6.shape)).astype(np.float32)


def emax(dose, y):
    e0 = numpyro.sample("e0", dist.Normal(0.0, 10.0))
    e_max = numpyro.sample("emax", dist.Normal(0.0, 20.0))
    ed50 = numpyro.sample("ed50", dist.LogNormal(jnp.log(10.0), 1.0))
    hill = numpyro.sample("hill", dist.LogNormal(0.0, 0.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(3.0))
    ratio = (dose / ed50) ** hill
    with numpyro.plate("n", dose.shape[0]):
        numpyro.sample("y", dist.Normal(e0 + e_max * ratio / (1.0 + ratio), sigma), obs=y)


# 7. the regularized horseshoe (Piironen & Vehtari 2017) in a logistic regression, 20 features
X7 = rng.normal(size=(100, 20)).astype(np.float32)
_W7 = np.zeros(20)
_W7[:3] = [2.0, -1.5, 1.0]
Y7 = (rng.uniform(size=100) < 1 / (1 + np.exp(-(X7 @ _W7)))).astype(np.int32)


def reg_horseshoe_logistic(x, y):
    p = x.shape[1]
    p0, slab_scale, slab_df = 3.0, 2.0, 4.0
    tau0 = p0 / (p - p0) * 2.0 / jnp.sqrt(x.shape[0])
    tau = numpyro.sample("tau", dist.HalfCauchy(tau0))
    c2 = numpyro.sample("c2", dist.InverseGamma(0.5 * slab_df, 0.5 * slab_df * slab_scale**2))
    with numpyro.plate("features", p):
        lam = numpyro.sample("lam", dist.HalfCauchy(1.0))
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    lam_tilde = jnp.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
    w = z * lam_tilde * tau
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=b + x @ w), obs=y)


# 8. zero-truncated Poisson counts in 25 groups with gamma rates (the truncation by a factor)
G8 = np.repeat(np.arange(25), 6).astype(np.int32)
_LAM8 = rng.gamma(2.0, 0.8, 25)
_Y8 = []
for g in G8:
    draw = 0
    while draw == 0:
        draw = rng.poisson(_LAM8[g])
    _Y8.append(draw)
Y8 = np.asarray(_Y8, np.int32)


def zero_truncated_poisson(group, y):
    a = numpyro.sample("a", dist.Exponential(1.0))
    b = numpyro.sample("b", dist.Exponential(1.0))
    with numpyro.plate("groups", 25):
        lam = numpyro.sample("lam", dist.Gamma(a, b))
    rate = lam[group]
    numpyro.factor("truncation", -jnp.sum(jnp.log1p(-jnp.exp(-rate))))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Poisson(rate), obs=y)


# 9. a Poisson regression whose coefficient drifts as a Gaussian random walk, 60 periods
T9 = 60
X9 = rng.normal(size=T9).astype(np.float32)
_BETA9 = np.cumsum(rng.normal(0, 0.1, T9)) + 0.5
Y9 = rng.poisson(np.exp(1.0 + _BETA9 * X9)).astype(np.int32)


def tvc_poisson(x, y):
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    drift = numpyro.sample("drift", dist.HalfNormal(0.5))
    beta = numpyro.sample("beta", dist.GaussianRandomWalk(drift, num_steps=x.shape[0]))
    with numpyro.plate("t", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(intercept + beta * x)), obs=y)


# 10. an AR(1) latent state through numpyro's scan, a latent site inside the step
T10 = 40
_STATE10 = np.zeros(T10)
for t in range(1, T10):
    _STATE10[t] = 0.7 * _STATE10[t - 1] + rng.normal(0, 0.5)
Y10 = (_STATE10 + rng.normal(0, 0.3, T10)).astype(np.float32)


def scan_ar1_state(y):
    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    sigma_state = numpyro.sample("sigma_state", dist.HalfNormal(1.0))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))

    def transition(previous, y_t):
        state = numpyro.sample("state", dist.Normal(phi * previous, sigma_state))
        numpyro.sample("y", dist.Normal(state, sigma_obs), obs=y_t)
        return state, None

    scan(transition, jnp.zeros(()), y)


EDGE_MODELS = {
    "car_latent": TextbookModel(
        "car_latent", car_latent, (E1, ADJ1, Y1), "dist.CAR latent, Poisson counts, 30 areas (simulated)"
    ),
    "wishart_precision": TextbookModel(
        "wishart_precision", wishart_precision, (Y2,), "Wishart precision and a mean, 60 x 3 (simulated)"
    ),
    "uniform_support_factor": TextbookModel(
        "uniform_support_factor",
        uniform_support_factor,
        (Y3,),
        "uniform(0, theta) data, the support as a -inf factor (simulated)",
    ),
    "gompertz_survival": TextbookModel(
        "gompertz_survival", gompertz_survival, (X4, Y4), "Gompertz survival regression, 120 (simulated)"
    ),
    "beta_boundary": TextbookModel(
        "beta_boundary", beta_boundary, (N5, Y5), "Beta(0.5, 0.5) probabilities, 0/12 and 12/12 (exact)"
    ),
    "emax": TextbookModel("emax", emax, (D6, Y6), "Emax dose-response, 48 (simulated)"),
    "reg_horseshoe_logistic": TextbookModel(
        "reg_horseshoe_logistic",
        reg_horseshoe_logistic,
        (X7, Y7),
        "regularized horseshoe logistic regression, 100 x 20 (simulated)",
    ),
    "zero_truncated_poisson": TextbookModel(
        "zero_truncated_poisson",
        zero_truncated_poisson,
        (G8, Y8),
        "zero-truncated Poisson, 25 gamma rates (simulated)",
    ),
    "tvc_poisson": TextbookModel(
        "tvc_poisson", tvc_poisson, (X9, Y9), "Poisson regression, random-walk coefficient, 60 (simulated)"
    ),
    "scan_ar1_state": TextbookModel(
        "scan_ar1_state", scan_ar1_state, (Y10,), "AR(1) state through numpyro's scan, 40 (simulated)"
    ),
}

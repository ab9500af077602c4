"""Ten more NumPyro models, written in the seventy-second session by a reviewer who never read or ran grepvi:
kinds the earlier sets lack, as an outside reviewer would write them to test a VI library (data simulated
with known parameters from a fixed seed of this module's own; each was checked only with a short NUTS
run):

* ``cox_partial``: Cox proportional hazards by the partial likelihood, 250 subjects, 3 covariates,
  a Weibull baseline, about 30% right-censored, times in years rounded to whole days so there are
  ties (Breslow: each subject's risk set starts at the first subject tied with it), the risk sets'
  log sums by a reverse ``lax.cumlogsumexp`` over the subjects sorted by time.
* ``conway_maxwell_poisson``: Conway-Maxwell-Poisson regression of 200 under-dispersed counts on
  2 covariates, ``log mu = X b`` with ``lambda = mu^nu`` (Guikema and Goffelt's centring), the
  normalizing constant a ``logsumexp`` over ``0..60``, ``log nu ~ Normal(0, 1)``.
* ``kalman_dlm``: a local-linear-trend dynamic linear model of 120 points, the level and slope
  marginalized by a Kalman filter in ``lax.scan``; only the observation, level and slope scales
  are latent (half-normal priors).
* ``sar_spatial``: a spatial autoregressive regression ``y = rho W y + X b + e`` on a 10 x 10
  lattice (row-normalized rook neighbours), the Jacobian ``log|I - rho W|`` by
  ``jnp.linalg.slogdet``, ``rho ~ Uniform(-0.9, 0.99)``.
* ``ou_irregular``: an Ornstein-Uhlenbeck process at 150 irregular times with measurement noise,
  the exact transition ``N(mu + (x - mu) e^(-theta dt), sigma^2 (1 - e^(-2 theta dt)) / (2 theta))``,
  the states non-centred (built by ``lax.scan`` from standard-normal innovations, the first from
  the stationary law).
* ``wiener_ddm``: a drift-diffusion model of 300 choices and response times, drift ``v``,
  boundary separation ``a``, relative bias ``w`` and non-decision time ``t0`` (below the fastest
  response), the first-passage density by Navarro and Fuss's (2009) large-time series truncated at
  50 terms (the leading exponential factored out; the sum clamped at a tiny positive value).
* ``selection_meta``: a random-effects meta-analysis of 40 published studies under publication bias,
  Vevea and Hedges' (1995) step-function selection model with one cut (one-sided p = 0.025):
  non-significant results are published with relative weight ``omega``, each study's density
  renormalized by ``Phi`` of the cut (``log_ndtr``).
* ``zero_inflated_beta``: 300 proportions with exact zeros, a beta regression of the mean (logit)
  and the precision (log) on covariates, and a logistic regression of the zeros.
* ``lognormal_race``: Rouder et al.'s (2015) two-accumulator log-normal race, 400 choice-RT trials
  in two conditions, each accumulator's log-mean per condition and log-sd per accumulator, a
  shared non-decision time; the winner's log-normal density times the loser's survival.
* ``hierarchical_gompertz_growth``: Gompertz growth ``A_i exp(-exp(-k_i (t - T_i)))`` of 25 animals
  x 12 weighings, each animal's asymptote and rate log-normal around population values
  (non-centred), a shared inflection time, Student-t residuals with unknown degrees of freedom.
"""

import math

import numpy as np
from textbook_models import TextbookModel

__all__ = ["STRANGER_MODELS"]

_RNG = np.random.default_rng(72)


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


def _log_factorial(n):
    return np.array([math.lgamma(k + 1.0) for k in np.ravel(n)]).reshape(np.shape(n))


# cox_partial: 250 subjects, Weibull(1.5) baseline, exponential censoring, times in years rounded to days
_COX_BETA = np.array([0.6, -0.4, 0.25])
_COX_X = np.stack([_RNG.normal(size=250), _RNG.integers(0, 2, size=250) - 0.5, _RNG.normal(size=250)], axis=1)
_COX_EVENT_TIME = (_RNG.exponential(size=250) / np.exp(_COX_X @ _COX_BETA)) ** (1.0 / 1.5)
_COX_CENSOR = _RNG.exponential(2.0, size=250)
_COX_TIME = np.maximum(np.round(np.minimum(_COX_EVENT_TIME, _COX_CENSOR) * 365.0) / 365.0, 1.0 / 365.0)
_COX_ORDER = np.argsort(_COX_TIME, kind="stable")
COX_X = _COX_X[_COX_ORDER].astype(np.float32)  # sorted by time, earliest first
COX_EVENT = (_COX_EVENT_TIME <= _COX_CENSOR)[_COX_ORDER].astype(np.float32)
COX_RISK_START = np.searchsorted(_COX_TIME[_COX_ORDER], _COX_TIME[_COX_ORDER], side="left").astype(np.int32)

# conway_maxwell_poisson: 200 rows, log mu = 1.2 + 0.35 x1 - 0.25 x2, nu = 2 (under-dispersed)
CMP_MAX_COUNT = 60
CMP_X = _RNG.normal(size=(200, 2)).astype(np.float32)
_CMP_TRUE = {"b0": 1.2, "b": np.array([0.35, -0.25]), "log_nu": math.log(2.0)}
_CMP_LOG_MU = _CMP_TRUE["b0"] + CMP_X.astype(np.float64) @ _CMP_TRUE["b"]
_CMP_SUPPORT = np.arange(200)
_CMP_LOG_W = 2.0 * (_CMP_SUPPORT[None, :] * _CMP_LOG_MU[:, None] - _log_factorial(_CMP_SUPPORT)[None, :])
_CMP_PMF = np.exp(_CMP_LOG_W - _CMP_LOG_W.max(1, keepdims=True))
_CMP_CDF = np.cumsum(_CMP_PMF / _CMP_PMF.sum(1, keepdims=True), axis=1)
CMP_Y = (_RNG.uniform(size=(200, 1)) > _CMP_CDF).sum(1).astype(np.float32)
assert CMP_Y.max() < CMP_MAX_COUNT // 2

# kalman_dlm: local linear trend, 120 points, scales 1.0 (obs), 0.4 (level), 0.08 (slope)
_DLM_TRUE = {"sigma_obs": 1.0, "sigma_level": 0.4, "sigma_slope": 0.08}
_DLM_LEVEL, _DLM_SLOPE = np.zeros(120), np.zeros(120)
_DLM_LEVEL[0], _DLM_SLOPE[0] = 10.0, 0.15
for _t in range(1, 120):
    _DLM_LEVEL[_t] = _DLM_LEVEL[_t - 1] + _DLM_SLOPE[_t - 1] + _DLM_TRUE["sigma_level"] * _RNG.normal()
    _DLM_SLOPE[_t] = _DLM_SLOPE[_t - 1] + _DLM_TRUE["sigma_slope"] * _RNG.normal()
DLM_Y = (_DLM_LEVEL + _DLM_TRUE["sigma_obs"] * _RNG.normal(size=120)).astype(np.float32)

# sar_spatial: 10 x 10 rook lattice, rho 0.5, intercept and two covariates, sigma 0.7
_SAR_SIDE = 10
_SAR_ROW, _SAR_COL = np.divmod(np.arange(_SAR_SIDE**2), _SAR_SIDE)
_SAR_ADJ = (
    np.abs(_SAR_ROW[:, None] - _SAR_ROW[None, :]) + np.abs(_SAR_COL[:, None] - _SAR_COL[None, :])
) == 1
SAR_W = (_SAR_ADJ / _SAR_ADJ.sum(1, keepdims=True)).astype(np.float32)
SAR_X = np.concatenate([np.ones((100, 1)), _RNG.normal(size=(100, 2))], axis=1).astype(np.float32)
_SAR_TRUE = {"rho": 0.5, "b": np.array([1.0, 0.8, -0.5]), "sigma": 0.7}
SAR_Y = np.linalg.solve(
    np.eye(100) - _SAR_TRUE["rho"] * SAR_W.astype(np.float64),
    SAR_X @ _SAR_TRUE["b"] + _SAR_TRUE["sigma"] * _RNG.normal(size=100),
).astype(np.float32)

# ou_irregular: 150 irregular times, theta 0.8, mu 1.5, sigma 0.6, measurement sd 0.3
_OU_TRUE = {"theta": 0.8, "mu": 1.5, "sigma": 0.6, "tau": 0.3}
_OU_GAP = 0.05 + _RNG.exponential(0.45, size=149)
OU_TIME = np.concatenate([[0.0], np.cumsum(_OU_GAP)]).astype(np.float32)
_OU_X = np.zeros(150)
_OU_X[0] = _OU_TRUE["mu"] + _OU_TRUE["sigma"] / math.sqrt(2.0 * _OU_TRUE["theta"]) * _RNG.normal()
for _t in range(1, 150):
    _decay = math.exp(-_OU_TRUE["theta"] * _OU_GAP[_t - 1])
    _sd = _OU_TRUE["sigma"] * math.sqrt((1.0 - _decay**2) / (2.0 * _OU_TRUE["theta"]))
    _OU_X[_t] = _OU_TRUE["mu"] + (_OU_X[_t - 1] - _OU_TRUE["mu"]) * _decay + _sd * _RNG.normal()
OU_Y = (_OU_X + _OU_TRUE["tau"] * _RNG.normal(size=150)).astype(np.float32)

# wiener_ddm: 300 trials, v 1.0, a 1.6, w 0.45, t0 0.3; drawn from the exact first-passage density
DDM_TERMS = 50
_DDM_TRUE = {"v": 1.0, "a": 1.6, "w": 0.45, "t0": 0.3}


def _ddm_lower_density(t, v, a, w, terms=400):
    """First-passage density at the lower boundary (unit diffusion), the large-time series."""
    k = np.arange(1, terms + 1)[None, :]
    series = np.sum(k * np.exp(-(k**2) * np.pi**2 * t[:, None] / (2.0 * a**2)) * np.sin(k * np.pi * w), 1)
    return np.pi / a**2 * np.exp(-v * a * w - v**2 * t / 2.0) * series


_DDM_STEP = 5e-4
_DDM_GRID = np.arange(_DDM_STEP / 2, 8.0, _DDM_STEP)
_DDM_MASS = (
    np.concatenate(
        [
            _ddm_lower_density(_DDM_GRID, _DDM_TRUE["v"], _DDM_TRUE["a"], _DDM_TRUE["w"]),
            _ddm_lower_density(_DDM_GRID, -_DDM_TRUE["v"], _DDM_TRUE["a"], 1.0 - _DDM_TRUE["w"]),
        ]
    )
    * _DDM_STEP
)
assert abs(_DDM_MASS.sum() - 1.0) < 1e-3
_DDM_CELL = _RNG.choice(
    _DDM_MASS.size, size=300, p=np.maximum(_DDM_MASS, 0.0) / np.maximum(_DDM_MASS, 0.0).sum()
)
DDM_CHOICE = (_DDM_CELL >= _DDM_GRID.size).astype(np.int32)  # 1: upper boundary
DDM_RT = (
    _DDM_TRUE["t0"] + _DDM_GRID[_DDM_CELL % _DDM_GRID.size] + _DDM_STEP * (_RNG.uniform(size=300) - 0.5)
).astype(np.float32)

# selection_meta: candidate studies drawn until 40 are published; mu 0.2, tau 0.15, omega 0.3
_META_TRUE = {"mu": 0.2, "tau": 0.15, "omega": 0.3}
_META_Y, _META_SE = [], []
while len(_META_Y) < 40:
    _se = math.sqrt(2.0 / _RNG.integers(15, 150))
    _y = _RNG.normal(_RNG.normal(_META_TRUE["mu"], _META_TRUE["tau"]), _se)
    if _y / _se > 1.959964 or _RNG.uniform() < _META_TRUE["omega"]:
        _META_Y.append(_y)
        _META_SE.append(_se)
META_Y = np.array(_META_Y, dtype=np.float32)
META_SE = np.array(_META_SE, dtype=np.float32)

# zero_inflated_beta: 300 rows, two covariates
ZIB_X = _RNG.normal(size=(300, 2)).astype(np.float32)
_ZIB_TRUE = {"b": np.array([-0.5, 0.8, -0.4]), "g": np.array([2.5, 0.5]), "c": np.array([-1.2, 0.7])}
_ZIB_MEAN = _expit(_ZIB_TRUE["b"][0] + ZIB_X @ _ZIB_TRUE["b"][1:])
_ZIB_PRECISION = np.exp(_ZIB_TRUE["g"][0] + _ZIB_TRUE["g"][1] * ZIB_X[:, 1])
_ZIB_ZERO = _RNG.uniform(size=300) < _expit(_ZIB_TRUE["c"][0] + _ZIB_TRUE["c"][1] * ZIB_X[:, 0])
ZIB_Y = np.where(
    _ZIB_ZERO, 0.0, _RNG.beta(_ZIB_MEAN * _ZIB_PRECISION, (1.0 - _ZIB_MEAN) * _ZIB_PRECISION)
).astype(np.float32)
assert np.all((ZIB_Y[~_ZIB_ZERO] > 0.0) & (ZIB_Y[~_ZIB_ZERO] < 1.0))

# lognormal_race: 400 trials, 2 conditions x 2 accumulators, t0 0.25
_LNR_TRUE = {"mu": np.array([[-0.6, 0.0], [-0.2, -0.3]]), "sigma": np.array([0.5, 0.6]), "t0": 0.25}
LNR_CONDITION = np.repeat([0, 1], 200).astype(np.int32)
_LNR_FINISH = np.exp(
    _LNR_TRUE["mu"][LNR_CONDITION] + _LNR_TRUE["sigma"][None, :] * _RNG.normal(size=(400, 2))
)
LNR_CHOICE = np.argmin(_LNR_FINISH, axis=1).astype(np.int32)
LNR_RT = (_LNR_TRUE["t0"] + _LNR_FINISH.min(1)).astype(np.float32)

# hierarchical_gompertz_growth: 25 animals weighed every 2 weeks from week 1 to week 23
GOMP_TIME = np.arange(1.0, 24.0, 2.0, dtype=np.float32)
_GOMP_TRUE = {
    "log_a": math.log(450.0),
    "sd_a": 0.12,
    "log_k": math.log(0.22),
    "sd_k": 0.15,
    "inflection": 5.0,
    "sigma": 6.0,
    "nu": 4.0,
}
_GOMP_A = np.exp(_GOMP_TRUE["log_a"] + _GOMP_TRUE["sd_a"] * _RNG.normal(size=25))
_GOMP_K = np.exp(_GOMP_TRUE["log_k"] + _GOMP_TRUE["sd_k"] * _RNG.normal(size=25))
_GOMP_MEAN = _GOMP_A[:, None] * np.exp(
    -np.exp(-_GOMP_K[:, None] * (GOMP_TIME[None, :] - _GOMP_TRUE["inflection"]))
)
GOMP_Y = (_GOMP_MEAN + _GOMP_TRUE["sigma"] * _RNG.standard_t(_GOMP_TRUE["nu"], size=(25, 12))).astype(
    np.float32
)


def cox_partial(x, event, risk_start):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    eta = x @ beta  # subjects sorted by time, earliest first
    # log sum of exp(eta) over everyone still at risk; tied subjects share the widest risk set
    log_risk = lax.cumlogsumexp(eta, reverse=True)[risk_start]
    numpyro.factor("partial_likelihood", jnp.sum(event * (eta - log_risk)))


def conway_maxwell_poisson(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import gammaln, logsumexp

    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    log_nu = numpyro.sample("log_nu", dist.Normal(0.0, 1.0))
    nu = jnp.exp(log_nu)
    log_mu = b0 + x @ b  # lambda = mu^nu, so mu is near the mode whatever nu
    j = jnp.arange(CMP_MAX_COUNT + 1, dtype=jnp.float32)
    log_z = logsumexp(nu * (j[None, :] * log_mu[:, None] - gammaln(j + 1.0)[None, :]), axis=1)
    numpyro.factor("counts", jnp.sum(nu * (y * log_mu - gammaln(y + 1.0)) - log_z))


def kalman_dlm(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(2.0))
    sigma_level = numpyro.sample("sigma_level", dist.HalfNormal(1.0))
    sigma_slope = numpyro.sample("sigma_slope", dist.HalfNormal(0.25))
    transition = jnp.array([[1.0, 1.0], [0.0, 1.0]])
    state_noise = jnp.diag(jnp.stack([sigma_level**2, sigma_slope**2]))
    obs_var = sigma_obs**2

    def step(carry, y_t):
        mean, cov = carry
        innovation = y_t - mean[0]
        innovation_var = cov[0, 0] + obs_var
        gain = cov[:, 0] / innovation_var
        log_lik = -0.5 * (jnp.log(2.0 * jnp.pi * innovation_var) + innovation**2 / innovation_var)
        mean = mean + gain * innovation
        cov = cov - jnp.outer(gain, gain) * innovation_var
        mean = transition @ mean
        cov = transition @ cov @ transition.T + state_noise
        return (mean, 0.5 * (cov + cov.T)), log_lik

    # a vague initial state centred on the first observation, no trend
    init = (jnp.stack([y[0], 0.0]), jnp.diag(jnp.array([25.0, 1.0])))
    _, log_liks = lax.scan(step, init, y)
    numpyro.factor("series", jnp.sum(log_liks))


def sar_spatial(w, x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    rho = numpyro.sample("rho", dist.Uniform(-0.9, 0.99))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    n = y.shape[0]
    _, log_det = jnp.linalg.slogdet(jnp.eye(n) - rho * w)
    residual = y - rho * (w @ y) - x @ b
    numpyro.factor("sites", log_det + jnp.sum(dist.Normal(0.0, sigma).log_prob(residual)))


def ou_irregular(time, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    theta = numpyro.sample("theta", dist.LogNormal(0.0, 1.0))
    mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(0.5))
    with numpyro.plate("states", y.shape[0]):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    gap = jnp.diff(time)
    decay = jnp.exp(-theta * gap)
    step_sd = sigma * jnp.sqrt(-jnp.expm1(-2.0 * theta * gap) / (2.0 * theta))
    x0 = mu + sigma / jnp.sqrt(2.0 * theta) * z[0]

    def step(x, inputs):
        d, s, shock = inputs
        following = mu + (x - mu) * d + s * shock
        return following, following

    _, later = lax.scan(step, x0, (decay, step_sd, z[1:]))
    states = jnp.concatenate([jnp.reshape(x0, (1,)), later])
    with numpyro.plate("times", y.shape[0]):
        numpyro.sample("y", dist.Normal(states, tau), obs=y)


def wiener_ddm(rt, choice):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    v = numpyro.sample("v", dist.Normal(0.0, 2.0))
    a = numpyro.sample("a", dist.LogNormal(math.log(1.5), 0.5))
    w = numpyro.sample("w", dist.Beta(3.0, 3.0))
    t0 = numpyro.sample("t0", dist.Uniform(0.0, jnp.min(rt)))
    t = jnp.maximum(rt - t0, 1e-6)  # decision time
    # the upper boundary's density is the lower one's with v -> -v, w -> 1 - w
    upper = choice == 1
    v_c = jnp.where(upper, -v, v)
    w_c = jnp.where(upper, 1.0 - w, w)
    k = jnp.arange(1, DDM_TERMS + 1, dtype=jnp.float32)[None, :]
    scaled = (jnp.pi**2 / (2.0 * a**2)) * t[:, None]
    # sum_k k exp(-k^2 pi^2 t / (2 a^2)) sin(k pi w), exp(-pi^2 t / (2 a^2)) factored out
    series = jnp.sum(k * jnp.exp(-(k**2 - 1.0) * scaled) * jnp.sin(k * jnp.pi * w_c[:, None]), axis=1)
    log_density = (
        jnp.log(jnp.pi)
        - 2.0 * jnp.log(a)
        - v_c * a * w_c
        - 0.5 * v_c**2 * t
        - scaled[:, 0]
        + jnp.log(jnp.maximum(series, 1e-30))
    )
    numpyro.factor("trials", jnp.sum(log_density))


def selection_meta(y, se):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import log_ndtr

    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(0.5))
    omega = numpyro.sample("omega", dist.Uniform(0.0, 1.0))
    total_sd = jnp.sqrt(tau**2 + se**2)
    cut = 1.959964 * se  # one-sided p = 0.025
    significant = y > cut
    log_p_significant = log_ndtr((mu - cut) / total_sd)
    log_p_not = log_ndtr((cut - mu) / total_sd)
    log_norm = jnp.logaddexp(log_p_significant, jnp.log(omega) + log_p_not)
    log_weight = jnp.where(significant, 0.0, jnp.log(omega))
    log_lik = dist.Normal(mu, total_sd).log_prob(y) + log_weight - log_norm
    numpyro.factor("studies", jnp.sum(log_lik))


def zero_inflated_beta(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.nn import sigmoid

    b = numpyro.sample("b", dist.Normal(0.0, 1.5).expand([3]).to_event(1))
    g = numpyro.sample("g", dist.Normal(jnp.array([2.0, 0.0]), jnp.array([1.5, 1.0])).to_event(1))
    c = numpyro.sample("c", dist.Normal(0.0, 1.5).expand([2]).to_event(1))
    mean = sigmoid(b[0] + x @ b[1:])
    precision = jnp.exp(g[0] + g[1] * x[:, 1])
    zero = y == 0.0
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("is_zero", dist.Bernoulli(logits=c[0] + c[1] * x[:, 0]), obs=zero.astype(jnp.float32))
    y_safe = jnp.where(zero, 0.5, y)
    log_beta = dist.Beta(mean * precision, (1.0 - mean) * precision).log_prob(y_safe)
    numpyro.factor("proportions", jnp.sum(jnp.where(zero, 0.0, log_beta)))


def lognormal_race(condition, choice, rt):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import log_ndtr

    mu = numpyro.sample("mu", dist.Normal(-0.5, 1.0).expand([2, 2]).to_event(2))  # condition x accumulator
    sigma = numpyro.sample("sigma", dist.LogNormal(-0.5, 0.5).expand([2]).to_event(1))
    t0 = numpyro.sample("t0", dist.Uniform(0.0, jnp.min(rt)))
    log_t = jnp.log(jnp.maximum(rt - t0, 1e-6))
    winner_mu, loser_mu = mu[condition, choice], mu[condition, 1 - choice]
    winner_sd, loser_sd = sigma[choice], sigma[1 - choice]
    log_density = dist.Normal(winner_mu, winner_sd).log_prob(log_t) - log_t
    log_survival = log_ndtr(-(log_t - loser_mu) / loser_sd)
    numpyro.factor("trials", jnp.sum(log_density + log_survival))


def hierarchical_gompertz_growth(time, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    animals = y.shape[0]
    log_a = numpyro.sample("log_a", dist.Normal(6.0, 1.0))
    log_k = numpyro.sample("log_k", dist.Normal(-1.5, 1.0))
    inflection = numpyro.sample("inflection", dist.Normal(8.0, 4.0))
    sd_a = numpyro.sample("sd_a", dist.HalfNormal(0.5))
    sd_k = numpyro.sample("sd_k", dist.HalfNormal(0.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    with numpyro.plate("animals", animals):
        z_a = numpyro.sample("z_a", dist.Normal(0.0, 1.0))
        z_k = numpyro.sample("z_k", dist.Normal(0.0, 1.0))
    asymptote = log_a + sd_a * z_a  # log scale
    rate = jnp.exp(log_k + sd_k * z_k)
    exponent = jnp.minimum(-rate[:, None] * (time[None, :] - inflection), 30.0)
    mean = jnp.exp(asymptote[:, None] - jnp.exp(exponent))
    with numpyro.plate("animals_obs", animals, dim=-2), numpyro.plate("weighings", time.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, mean, sigma), obs=y)


STRANGER_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "cox_partial",
            cox_partial,
            (COX_X, COX_EVENT, COX_RISK_START),
            "Cox proportional hazards, Breslow partial likelihood, 250 subjects, 30% censored (simulated)",
        ),
        TextbookModel(
            "conway_maxwell_poisson",
            conway_maxwell_poisson,
            (CMP_X, CMP_Y),
            "Conway-Maxwell-Poisson regression, under-dispersed counts, 200 rows (simulated)",
        ),
        TextbookModel(
            "kalman_dlm",
            kalman_dlm,
            (DLM_Y,),
            "local-linear-trend model marginalized by a Kalman filter, 120 points (simulated)",
        ),
        TextbookModel(
            "sar_spatial",
            sar_spatial,
            (SAR_W, SAR_X, SAR_Y),
            "spatial autoregressive regression on a 10 x 10 lattice, slogdet Jacobian (simulated)",
        ),
        TextbookModel(
            "ou_irregular",
            ou_irregular,
            (OU_TIME, OU_Y),
            "Ornstein-Uhlenbeck process at 150 irregular times, noisy, non-centred states (simulated)",
        ),
        TextbookModel(
            "wiener_ddm",
            wiener_ddm,
            (DDM_RT, DDM_CHOICE),
            "Wiener drift-diffusion model, large-time series density, 300 trials (simulated)",
        ),
        TextbookModel(
            "selection_meta",
            selection_meta,
            (META_Y, META_SE),
            "random-effects meta-analysis, step-function publication-bias model, 40 studies (simulated)",
        ),
        TextbookModel(
            "zero_inflated_beta",
            zero_inflated_beta,
            (ZIB_X, ZIB_Y),
            "zero-inflated beta regression, mean, precision and zero parts, 300 rows (simulated)",
        ),
        TextbookModel(
            "lognormal_race",
            lognormal_race,
            (LNR_CONDITION, LNR_CHOICE, LNR_RT),
            "two-accumulator log-normal race, two conditions, 400 trials (simulated)",
        ),
        TextbookModel(
            "hierarchical_gompertz_growth",
            hierarchical_gompertz_growth,
            (GOMP_TIME, GOMP_Y),
            "Gompertz growth curves, random asymptote and rate, Student-t residuals, 25 x 12 (simulated)",
        ),
    )
}

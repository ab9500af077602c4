"""Ten more NumPyro models, written in the seventy-first session by a reviewer who never read or ran
grepvi: kinds the earlier sets lack, as an outside reviewer would write them to test a VI library
(data simulated with known parameters from a fixed seed of this module's own; each was checked
only with a short NUTS run):

* ``n_mixture``: Royle's N-mixture abundance model, 80 sites x 3 visits: site abundance
  ``Poisson(exp(b0 + b1 forest))``, per-visit detection ``logit p = a0 + a1 wind``, counts
  ``Binomial(N, p)``, the latent abundance summed out over ``N = 0..60`` with ``logsumexp``.
* ``var1``: a vector autoregression VAR(1) of 3 series over 150 steps, a full 3 x 3 coefficient
  matrix, intercepts, and a correlated Normal innovation (``LKJCholesky(3, 2)`` times HalfNormal
  scales), conditional on the first observation.
* ``plackett_luce``: a Plackett-Luce (rank-ordered logit) model of 120 judges each ranking 5 of
  10 items, the first item's log-worth fixed at 0 (corner constraint), the likelihood of a
  ranking as successive softmax choices (``lax.cumlogsumexp`` over the remaining items).
* ``bg_nbd``: the BG/NBD customer-lifetime model (Fader, Hardie & Lee 2005) of 600 customers'
  repeat-purchase frequency, recency and age, its closed-form likelihood (``betaln``,
  ``gammaln``) in the four population parameters ``r, alpha, a, b`` (log-normal priors).
* ``arma11``: an ARMA(1, 1) of 200 points, the innovations recursed with ``lax.scan``
  (conditional likelihood, the first residual ``y_0 - mu``), ``phi`` and ``theta`` ``Uniform(-1, 1)``.
* ``piecewise_exponential``: proportional-hazards survival of 300 patients with a piecewise
  constant baseline over 8 intervals, its log hazard a Gaussian random walk (non-centred), two
  covariates, right censoring (the exposures per interval precomputed as data).
* ``ricker_state_space``: a Ricker population model over 60 years with log-normal process noise
  (non-centred: the log abundance built by ``lax.scan`` from standard-normal shocks), Poisson
  counts, growth rate ``r`` and carrying capacity ``K``.
* ``distance_sampling``: line-transect distance sampling on 30 transects, a half-normal detection
  function whose scale depends on vegetation cover, distances truncated at 0.2 km, counts
  ``Poisson(D_j 2 L_j esw_j)`` with a log density on habitat plus a transect effect (non-centred).
* ``bivariate_poisson``: Karlis and Ntzoufras' bivariate Poisson for football scores, 20 teams in
  a double round robin (380 matches), attack and defence effects (non-centred, centred to sum to
  0), home advantage, a shared component ``lambda3``, the pmf's sum over ``k`` by ``logsumexp``.
* ``ordinal_varying_thresholds``: a hierarchical ordinal (cumulative logit) regression, 20 groups
  x 30 rows, 5 categories, two covariates, each group's 4 thresholds varying around shared ones
  (the first threshold and the log gaps, non-centred), so they stay ordered.
"""

import math

import numpy as np
from textbook_models import TextbookModel

__all__ = ["OUTSIDER_MODELS"]

_RNG = np.random.default_rng(71)


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


# n_mixture: 80 sites x 3 visits, abundance on forest cover, detection on wind
NMIX_MAX_N = 60
NMIX_FOREST = _RNG.normal(size=80).astype(np.float32)
NMIX_WIND = _RNG.normal(size=(80, 3)).astype(np.float32)
_NMIX_TRUE = {"b0": 1.0, "b1": 0.6, "a0": 0.2, "a1": -0.7}
_NMIX_N = _RNG.poisson(np.exp(_NMIX_TRUE["b0"] + _NMIX_TRUE["b1"] * NMIX_FOREST))
_NMIX_P = _expit(_NMIX_TRUE["a0"] + _NMIX_TRUE["a1"] * NMIX_WIND)
NMIX_Y = _RNG.binomial(_NMIX_N[:, None], _NMIX_P).astype(np.float32)
assert _NMIX_N.max() < NMIX_MAX_N

# var1: 3 series, 150 steps
_VAR_A = np.array([[0.5, 0.1, 0.0], [0.2, 0.4, -0.1], [0.0, 0.3, 0.3]])
_VAR_C = np.array([0.5, -0.2, 0.1])
_VAR_SD = np.array([0.5, 0.8, 0.6])
_VAR_CORR = np.array([[1.0, 0.3, -0.2], [0.3, 1.0, 0.4], [-0.2, 0.4, 1.0]])
_VAR_CHOL = np.linalg.cholesky(_VAR_SD[:, None] * _VAR_CORR * _VAR_SD[None, :])
_VAR_Y = np.zeros((200, 3))
for _t in range(1, 200):
    _VAR_Y[_t] = _VAR_C + _VAR_A @ _VAR_Y[_t - 1] + _VAR_CHOL @ _RNG.normal(size=3)
VAR_Y = _VAR_Y[50:].astype(np.float32)  # the first 50 steps are burn-in

# plackett_luce: 120 judges rank 5 of 10 items (best first)
_PL_WORTH = np.concatenate([[0.0], np.linspace(-1.0, 1.5, 9) + 0.2 * _RNG.normal(size=9)])
_PL_SHOWN = np.argsort(_RNG.uniform(size=(120, 10)), axis=1)[:, :5]
_PL_UTILITY = _PL_WORTH[_PL_SHOWN] + _RNG.gumbel(size=(120, 5))
PL_ORDER = np.take_along_axis(_PL_SHOWN, np.argsort(-_PL_UTILITY, axis=1), axis=1).astype(np.int32)

# bg_nbd: 600 customers observed for 26 to 52 weeks after their first purchase
_BG_TRUE = {"r": 0.5, "alpha": 5.0, "a": 0.8, "b": 2.5}
_BG_AGE = _RNG.uniform(26.0, 52.0, size=600)
_BG_RATE = _RNG.gamma(_BG_TRUE["r"], 1.0 / _BG_TRUE["alpha"], size=600)
_BG_DROP = _RNG.beta(_BG_TRUE["a"], _BG_TRUE["b"], size=600)
_BG_FREQUENCY = np.zeros(600)
_BG_RECENCY = np.zeros(600)
for _i in range(600):
    _clock = 0.0
    while True:
        _clock += _RNG.exponential(1.0 / _BG_RATE[_i])
        if _clock > _BG_AGE[_i]:
            break
        _BG_FREQUENCY[_i] += 1.0
        _BG_RECENCY[_i] = _clock
        if _RNG.uniform() < _BG_DROP[_i]:  # inactive after this purchase
            break
BG_FREQUENCY = _BG_FREQUENCY.astype(np.float32)
BG_RECENCY = _BG_RECENCY.astype(np.float32)
BG_AGE = _BG_AGE.astype(np.float32)

# arma11: 200 points, mu 1, phi 0.6, theta 0.3, sigma 0.5
_ARMA_E = 0.5 * _RNG.normal(size=300)
_ARMA_Y = np.ones(300)
for _t in range(1, 300):
    _ARMA_Y[_t] = 1.0 + 0.6 * (_ARMA_Y[_t - 1] - 1.0) + 0.3 * _ARMA_E[_t - 1] + _ARMA_E[_t]
ARMA_Y = _ARMA_Y[100:].astype(np.float32)

# piecewise_exponential: 300 patients, 8 intervals, administrative censoring at 6
PWE_CUTS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0])
_PWE_HAZARD = np.array([0.10, 0.14, 0.18, 0.22, 0.25, 0.22, 0.18, 0.15])
_PWE_BETA = np.array([0.5, -0.7])
PWE_X = np.stack([_RNG.normal(size=300), _RNG.integers(0, 2, size=300)], axis=1).astype(np.float32)
_PWE_WIDTH = np.diff(PWE_CUTS)
_PWE_CUMHAZ = np.concatenate([[0.0], np.cumsum(_PWE_HAZARD * _PWE_WIDTH)])  # at the cuts
_PWE_TARGET = _RNG.exponential(size=300) / np.exp(PWE_X @ _PWE_BETA)  # baseline cumulative hazard
_PWE_K = np.clip(np.searchsorted(_PWE_CUMHAZ, _PWE_TARGET) - 1, 0, 7)
_PWE_EVENT_TIME = np.where(
    _PWE_TARGET < _PWE_CUMHAZ[-1],
    PWE_CUTS[_PWE_K] + (_PWE_TARGET - _PWE_CUMHAZ[_PWE_K]) / _PWE_HAZARD[_PWE_K],
    np.inf,
)
_PWE_CENSOR = np.minimum(_RNG.uniform(1.0, 12.0, size=300), 6.0)
_PWE_TIME = np.minimum(_PWE_EVENT_TIME, _PWE_CENSOR)
PWE_EVENT = (_PWE_EVENT_TIME <= _PWE_CENSOR).astype(np.float32)
PWE_INTERVAL = np.clip(np.searchsorted(PWE_CUTS, _PWE_TIME, side="right") - 1, 0, 7).astype(np.int32)
PWE_EXPOSURE = np.clip(_PWE_TIME[:, None] - PWE_CUTS[None, :-1], 0.0, _PWE_WIDTH[None, :]).astype(np.float32)

# ricker_state_space: 60 years, r 0.7, K 150, process sd 0.15, starting from 10 animals
_RICKER_TRUE = {"r": 0.7, "log_k": math.log(150.0), "sigma": 0.15, "x0": math.log(10.0)}
_RICKER_X = np.zeros(60)
_RICKER_X[0] = _RICKER_TRUE["x0"]
for _t in range(1, 60):
    _RICKER_X[_t] = (
        _RICKER_X[_t - 1]
        + _RICKER_TRUE["r"] * (1.0 - np.exp(_RICKER_X[_t - 1]) / 150.0)
        + _RICKER_TRUE["sigma"] * _RNG.normal()
    )
RICKER_COUNTS = _RNG.poisson(np.exp(_RICKER_X)).astype(np.float32)

# distance_sampling: 30 transects of 1-4 km, half-normal detection, truncation at 0.2 km
DS_WIDTH = np.float32(0.2)
DS_LENGTH = _RNG.uniform(1.0, 4.0, size=30).astype(np.float32)
DS_COVER = _RNG.normal(size=30).astype(np.float32)
DS_HABITAT = _RNG.normal(size=30).astype(np.float32)
_DS_TRUE = {"a0": math.log(0.08), "a1": -0.3, "d0": 3.0, "d1": 0.5, "sd_density": 0.3}
_DS_EFFECT = _DS_TRUE["sd_density"] * _RNG.normal(size=30)
_DS_DENSITY = np.exp(_DS_TRUE["d0"] + _DS_TRUE["d1"] * DS_HABITAT + _DS_EFFECT)
_DS_SIGMA = np.exp(_DS_TRUE["a0"] + _DS_TRUE["a1"] * DS_COVER)
_DS_DIST, _DS_TRANSECT = [], []
for _j in range(30):
    _d = _RNG.uniform(0.0, 0.2, size=_RNG.poisson(_DS_DENSITY[_j] * 2.0 * 0.2 * DS_LENGTH[_j]))
    _d = _d[_RNG.uniform(size=_d.size) < np.exp(-(_d**2) / (2.0 * _DS_SIGMA[_j] ** 2))]
    _DS_DIST.append(_d)
    _DS_TRANSECT.append(np.full(_d.size, _j))
DS_DISTANCE = np.concatenate(_DS_DIST).astype(np.float32)
DS_TRANSECT = np.concatenate(_DS_TRANSECT).astype(np.int32)
DS_COUNT = np.bincount(DS_TRANSECT, minlength=30).astype(np.float32)

# bivariate_poisson: 20 teams, each pair meets twice (380 matches)
BP_MAX_GOALS = 12
_BP_HOME, _BP_AWAY = np.nonzero(~np.eye(20, dtype=bool))
BP_HOME = _BP_HOME.astype(np.int32)
BP_AWAY = _BP_AWAY.astype(np.int32)
_BP_ATTACK = 0.3 * _RNG.normal(size=20)
_BP_ATTACK -= _BP_ATTACK.mean()
_BP_DEFENCE = 0.25 * _RNG.normal(size=20)
_BP_DEFENCE -= _BP_DEFENCE.mean()
_BP_TRUE = {"mu": 0.1, "home": 0.25, "lambda3": 0.2}
_BP_L1 = np.exp(_BP_TRUE["mu"] + _BP_TRUE["home"] + _BP_ATTACK[BP_HOME] - _BP_DEFENCE[BP_AWAY])
_BP_L2 = np.exp(_BP_TRUE["mu"] + _BP_ATTACK[BP_AWAY] - _BP_DEFENCE[BP_HOME])
_BP_SHARED = _RNG.poisson(_BP_TRUE["lambda3"], size=380)
BP_GOALS = np.stack([_RNG.poisson(_BP_L1) + _BP_SHARED, _RNG.poisson(_BP_L2) + _BP_SHARED], axis=1).astype(
    np.float32
)
assert BP_GOALS.max() <= BP_MAX_GOALS

# ordinal_varying_thresholds: 20 groups x 30 rows, 5 categories, two covariates
ORD_GROUPS = 20
ORD_GROUP = np.repeat(np.arange(ORD_GROUPS), 30).astype(np.int32)
ORD_X = _RNG.normal(size=(600, 2)).astype(np.float32)
_ORD_TRUE = {
    "beta": np.array([0.8, -0.5]),
    "c1": -1.5,
    "log_gap": np.log([1.0, 1.2, 0.9]),
    "sd_first": 0.6,
    "sd_gap": 0.25,
}
_ORD_FIRST = _ORD_TRUE["c1"] + _ORD_TRUE["sd_first"] * _RNG.normal(size=ORD_GROUPS)
_ORD_GAPS = np.exp(_ORD_TRUE["log_gap"][None, :] + _ORD_TRUE["sd_gap"] * _RNG.normal(size=(ORD_GROUPS, 3)))
_ORD_CUT = _ORD_FIRST[:, None] + np.pad(np.cumsum(_ORD_GAPS, axis=1), ((0, 0), (1, 0)))
_ORD_CDF = _expit(_ORD_CUT[ORD_GROUP] - (ORD_X @ _ORD_TRUE["beta"])[:, None])  # P(Y <= k), k = 0..3
ORD_Y = (_RNG.uniform(size=600)[:, None] > _ORD_CDF).sum(1).astype(np.int32)


def n_mixture(forest, wind, y):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import gammaln, logsumexp

    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 1.0))
    a0 = numpyro.sample("a0", dist.Normal(0.0, 1.5))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 1.0))
    lam = jnp.exp(b0 + b1 * forest)  # (sites,)
    logit_p = a0 + a1 * wind  # (sites, visits)
    n = jnp.arange(NMIX_MAX_N + 1, dtype=jnp.float32)  # the abundances summed over
    log_prior = dist.Poisson(lam[:, None]).log_prob(n[None, :])  # (sites, N)
    yk, nk = y[:, :, None], n[None, None, :]
    log_choose = gammaln(nk + 1.0) - gammaln(yk + 1.0) - gammaln(jnp.maximum(nk - yk, 0.0) + 1.0)
    log_detect = log_choose + yk * jax.nn.log_sigmoid(logit_p)[:, :, None]
    log_detect = log_detect + (nk - yk) * jax.nn.log_sigmoid(-logit_p)[:, :, None]
    log_detect = jnp.where(nk >= yk, log_detect, -jnp.inf).sum(1)  # (sites, N)
    numpyro.factor("counts", jnp.sum(logsumexp(log_prior + log_detect, axis=1)))


def var1(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    k = y.shape[1]
    c = numpyro.sample("c", dist.Normal(0.0, 2.0).expand([k]).to_event(1))
    a = numpyro.sample("A", dist.Normal(0.0, 0.5).expand([k, k]).to_event(2))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0).expand([k]).to_event(1))
    l_corr = numpyro.sample("L_corr", dist.LKJCholesky(k, 2.0))
    scale_tril = sigma[:, None] * l_corr
    mean = c + y[:-1] @ a.T
    with numpyro.plate("time", y.shape[0] - 1):
        numpyro.sample("y", dist.MultivariateNormal(mean, scale_tril=scale_tril), obs=y[1:])
    numpyro.deterministic("corr", l_corr @ jnp.swapaxes(l_corr, -1, -2))


def plackett_luce(order):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    free = numpyro.sample("worth", dist.Normal(0.0, 2.0).expand([9]).to_event(1))
    worth = jnp.concatenate([jnp.zeros(1), free])
    u = worth[order]  # (judges, positions), best first
    # each position's pick is a softmax choice among the items not yet ranked
    remaining = lax.cumlogsumexp(u, axis=1, reverse=True)
    numpyro.factor("rankings", jnp.sum(u[:, :-1] - remaining[:, :-1]))


def bg_nbd(frequency, recency, age):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import betaln, gammaln

    r = numpyro.sample("r", dist.LogNormal(0.0, 1.0))
    alpha = numpyro.sample("alpha", dist.LogNormal(1.0, 1.0))
    a = numpyro.sample("a", dist.LogNormal(0.0, 1.0))
    b = numpyro.sample("b", dist.LogNormal(0.0, 1.0))
    x = frequency
    # alive throughout: B(a, b + x) / B(a, b) Gamma(r + x) alpha^r / (Gamma(r) (alpha + T)^(r + x))
    alive = (
        gammaln(r + x)
        - gammaln(r)
        + r * jnp.log(alpha)
        + betaln(a, b + x)
        - betaln(a, b)
        - (r + x) * jnp.log(alpha + age)
    )
    # dropped out right after the last purchase (only for x > 0): relative to the first term
    x_safe = jnp.maximum(x, 1.0)
    ratio = jnp.log(a) - jnp.log(b + x_safe - 1.0)
    ratio = ratio + (r + x) * (jnp.log(alpha + age) - jnp.log(alpha + recency))
    log_lik = alive + jnp.where(x > 0, jnp.logaddexp(0.0, ratio), 0.0)
    numpyro.factor("customers", jnp.sum(log_lik))


def arma11(y):
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    theta = numpyro.sample("theta", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))

    def step(error, pair):
        previous, current = pair
        prediction = mu + phi * (previous - mu) + theta * error
        return current - prediction, prediction

    _, predictions = lax.scan(step, y[0] - mu, (y[:-1], y[1:]))
    with numpyro.plate("time", y.shape[0] - 1):
        numpyro.sample("y", dist.Normal(predictions, sigma), obs=y[1:])


def piecewise_exponential(x, exposure, interval, event):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    intervals = exposure.shape[1]
    log_h1 = numpyro.sample("log_h1", dist.Normal(-2.0, 2.0))
    sd_rw = numpyro.sample("sd_rw", dist.HalfNormal(0.5))
    with numpyro.plate("steps", intervals - 1):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    log_h = log_h1 + jnp.concatenate([jnp.zeros(1), jnp.cumsum(sd_rw * z)])
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    eta = x @ beta
    cumulative_hazard = (exposure @ jnp.exp(log_h)) * jnp.exp(eta)
    numpyro.deterministic("hazard", jnp.exp(log_h))
    numpyro.factor("survival", jnp.sum(event * (log_h[interval] + eta) - cumulative_hazard))


def ricker_state_space(counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    years = counts.shape[0]
    r = numpyro.sample("r", dist.LogNormal(-0.5, 0.7))
    log_k = numpyro.sample("log_k", dist.Normal(5.0, 1.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    x0 = numpyro.sample("x0", dist.Normal(2.0, 1.5))
    with numpyro.plate("shocks", years - 1):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))

    def step(x, shock):
        following = x + r * (1.0 - jnp.exp(x - log_k)) + sigma * shock
        return following, following

    _, later = lax.scan(step, x0, z)
    log_abundance = jnp.concatenate([jnp.reshape(x0, (1,)), later])
    with numpyro.plate("years", years):
        numpyro.sample("counts", dist.Poisson(jnp.exp(log_abundance)), obs=counts)


def distance_sampling(distance, transect, count, length, cover, habitat, width):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import erf

    a0 = numpyro.sample("a0", dist.Normal(-2.5, 1.0))
    a1 = numpyro.sample("a1", dist.Normal(0.0, 1.0))
    d0 = numpyro.sample("d0", dist.Normal(2.0, 2.0))
    d1 = numpyro.sample("d1", dist.Normal(0.0, 1.0))
    sd_density = numpyro.sample("sd_density", dist.HalfNormal(1.0))
    transects = count.shape[0]
    with numpyro.plate("transects", transects):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    sigma = jnp.exp(a0 + a1 * cover)  # half-normal detection scale per transect
    # effective strip half-width: the integral of exp(-d^2 / (2 sigma^2)) over [0, width]
    esw = sigma * jnp.sqrt(jnp.pi / 2.0) * erf(width / (jnp.sqrt(2.0) * sigma))
    density = jnp.exp(d0 + d1 * habitat + sd_density * z)
    with numpyro.plate("transects_obs", transects):
        numpyro.sample("count", dist.Poisson(density * 2.0 * length * esw), obs=count)
    s = sigma[transect]
    numpyro.factor("distances", jnp.sum(-(distance**2) / (2.0 * s**2) - jnp.log(esw[transect])))


def bivariate_poisson(home_team, away_team, goals):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import gammaln, logsumexp

    teams = 20
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    home = numpyro.sample("home", dist.Normal(0.0, 0.5))
    lambda3 = numpyro.sample("lambda3", dist.HalfNormal(0.5))
    sd_attack = numpyro.sample("sd_attack", dist.HalfNormal(0.5))
    sd_defence = numpyro.sample("sd_defence", dist.HalfNormal(0.5))
    with numpyro.plate("teams", teams):
        z_attack = numpyro.sample("z_attack", dist.Normal(0.0, 1.0))
        z_defence = numpyro.sample("z_defence", dist.Normal(0.0, 1.0))
    attack = sd_attack * z_attack
    attack = attack - attack.mean()
    defence = sd_defence * z_defence
    defence = defence - defence.mean()
    numpyro.deterministic("attack", attack)
    numpyro.deterministic("defence", defence)
    log_l1 = mu + home + attack[home_team] - defence[away_team]
    log_l2 = mu + attack[away_team] - defence[home_team]
    x, y = goals[:, 0], goals[:, 1]
    # P(x, y) = e^-(l1+l2+l3) l1^x/x! l2^y/y! sum_k C(x,k) C(y,k) k! (l3/(l1 l2))^k, k <= min(x, y)
    k = jnp.arange(BP_MAX_GOALS + 1, dtype=jnp.float32)[None, :]
    xk, yk = x[:, None], y[:, None]
    log_terms = (
        gammaln(xk + 1.0)
        - gammaln(jnp.maximum(xk - k, 0.0) + 1.0)
        + gammaln(yk + 1.0)
        - gammaln(jnp.maximum(yk - k, 0.0) + 1.0)
        - gammaln(k + 1.0)
        + k * (jnp.log(lambda3) - log_l1 - log_l2)[:, None]
    )
    log_terms = jnp.where(k <= jnp.minimum(xk, yk), log_terms, -jnp.inf)
    log_pmf = (
        -(jnp.exp(log_l1) + jnp.exp(log_l2) + lambda3)
        + x * log_l1
        - gammaln(x + 1.0)
        + y * log_l2
        - gammaln(y + 1.0)
        + logsumexp(log_terms, axis=1)
    )
    numpyro.factor("matches", jnp.sum(log_pmf))


def ordinal_varying_thresholds(group, x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    groups, gaps = ORD_GROUPS, 3
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    c1 = numpyro.sample("c1", dist.Normal(0.0, 2.0))
    log_gap = numpyro.sample("log_gap", dist.Normal(0.0, 1.0).expand([gaps]).to_event(1))
    sd_first = numpyro.sample("sd_first", dist.HalfNormal(1.0))
    sd_gap = numpyro.sample("sd_gap", dist.HalfNormal(0.5))
    with numpyro.plate("groups", groups):
        z_first = numpyro.sample("z_first", dist.Normal(0.0, 1.0))
        z_gap = numpyro.sample("z_gap", dist.Normal(0.0, 1.0).expand([gaps]).to_event(1))
    first = c1 + sd_first * z_first  # (groups,)
    gap = jnp.exp(log_gap + sd_gap * z_gap)  # (groups, gaps)
    cutpoints = first[:, None] + jnp.concatenate([jnp.zeros((groups, 1)), jnp.cumsum(gap, axis=1)], axis=1)
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.OrderedLogistic(x @ beta, cutpoints[group]), obs=y)


OUTSIDER_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "n_mixture",
            n_mixture,
            (NMIX_FOREST, NMIX_WIND, NMIX_Y),
            "N-mixture abundance model, 80 sites x 3 visits, abundance summed out (simulated)",
        ),
        TextbookModel(
            "var1",
            var1,
            (VAR_Y,),
            "VAR(1) of 3 series, correlated innovations, 150 steps (simulated)",
        ),
        TextbookModel(
            "plackett_luce",
            plackett_luce,
            (PL_ORDER,),
            "Plackett-Luce rankings, 120 judges rank 5 of 10 items (simulated)",
        ),
        TextbookModel(
            "bg_nbd",
            bg_nbd,
            (BG_FREQUENCY, BG_RECENCY, BG_AGE),
            "BG/NBD customer-lifetime model, 600 customers (simulated)",
        ),
        TextbookModel(
            "arma11",
            arma11,
            (ARMA_Y,),
            "ARMA(1, 1) by lax.scan, 200 points (simulated)",
        ),
        TextbookModel(
            "piecewise_exponential",
            piecewise_exponential,
            (PWE_X, PWE_EXPOSURE, PWE_INTERVAL, PWE_EVENT),
            "piecewise-exponential proportional hazards, random-walk baseline, 300 patients (simulated)",
        ),
        TextbookModel(
            "ricker_state_space",
            ricker_state_space,
            (RICKER_COUNTS,),
            "Ricker population state-space model, process noise, Poisson counts, 60 years (simulated)",
        ),
        TextbookModel(
            "distance_sampling",
            distance_sampling,
            (DS_DISTANCE, DS_TRANSECT, DS_COUNT, DS_LENGTH, DS_COVER, DS_HABITAT, DS_WIDTH),
            "line-transect distance sampling, half-normal detection, 30 transects (simulated)",
        ),
        TextbookModel(
            "bivariate_poisson",
            bivariate_poisson,
            (BP_HOME, BP_AWAY, BP_GOALS),
            "bivariate Poisson football scores, 20 teams, 380 matches (simulated)",
        ),
        TextbookModel(
            "ordinal_varying_thresholds",
            ordinal_varying_thresholds,
            (ORD_GROUP, ORD_X, ORD_Y),
            "hierarchical ordinal regression, group-varying thresholds, 20 x 30 rows (simulated)",
        ),
    )
}

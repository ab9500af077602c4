"""Twelve NumPyro models written in the fifty-second session without reading or running grepvi, as an
outside user would write them, of kinds no other benchmark set has: a skew-normal regression (the
skew-normal density written as a factor, a latent skewness), a generalized-Pareto
peaks-over-threshold model (a log-linear scale and a tail shape in the unit interval), a mixed
(random-coefficient) conditional-logit choice model over three alternatives, an interval-censored
log-logistic accelerated-failure model, a mixture cure model (a cured fraction and Weibull
latency, right-censored, the two states summed out by ``logaddexp``), a source-apportionment
unmixing with one simplex of source proportions per sample, a daily temperature cycle whose
per-day phases are circular latents (``VonMises`` around a circular mean), an isotonic
(monotone) dose-response whose group means are an ordered vector (``TransformedDistribution``
with ``OrderedTransform``), seemingly unrelated regressions with an ``LKJCholesky`` error
correlation, a self-exciting (Hawkes) point process with an exponential kernel and a branching
ratio in the unit interval, a shifted log-normal reaction-time model whose non-decision time is
bounded by the fastest response, and a Cormack-Jolly-Seber capture-recapture model, its
alive/dead states summed out by hand. Every latent is continuous. Simulated data from known
parameters, seed 52.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.stats import norm
from numpyro.distributions.transforms import OrderedTransform
from textbook_models import TextbookModel

__all__ = ["OUTLIER_MODELS"]

rng = np.random.default_rng(52)

# 1. skew-normal regression: y = 0.5 + 1.2 x + e, e skew-normal with scale 1.5 and skewness 4
X1 = rng.normal(size=200).astype(np.float32)
_DELTA1 = 4.0 / np.sqrt(1.0 + 4.0**2)
_E1 = 1.5 * (_DELTA1 * np.abs(rng.normal(size=200)) + np.sqrt(1 - _DELTA1**2) * rng.normal(size=200))
Y1 = (0.5 + 1.2 * X1 + _E1).astype(np.float32)


def skew_normal(x, y):
    xi = numpyro.sample("xi", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 2.5))
    omega = numpyro.sample("omega", dist.HalfNormal(3.0))
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 5.0))
    z = (y - xi - b * x) / omega
    numpyro.factor("y", (jnp.log(2.0) - jnp.log(omega) + norm.logpdf(z) + norm.logcdf(alpha * z)).sum())


# 2. generalized Pareto exceedances over a threshold: log scale 1.0 + 0.4 x (x a scaled year),
# shape 0.25
X2 = rng.uniform(-1.0, 1.0, size=150).astype(np.float32)
_SIGMA2 = np.exp(1.0 + 0.4 * X2)
Y2 = (_SIGMA2 / 0.25 * ((1.0 - rng.uniform(size=150)) ** -0.25 - 1.0)).astype(np.float32)


def gpd_exceedances(x, excess):
    s0 = numpyro.sample("s0", dist.Normal(0.0, 2.0))
    s1 = numpyro.sample("s1", dist.Normal(0.0, 1.0))
    shape = numpyro.sample("shape", dist.Uniform(0.0, 1.0))
    log_scale = s0 + s1 * x
    log_lik = -log_scale - (1.0 / shape + 1.0) * jnp.log1p(shape * excess / jnp.exp(log_scale))
    numpyro.factor("excess", log_lik.sum())


# 3. mixed logit: 50 people, 10 choice tasks of 3 alternatives each (price, quality); the price
# coefficient varies by person, Normal(-1.5, 0.5)
_P3, _T3, _J3 = 50, 10, 3
PRICE3 = rng.uniform(1.0, 3.0, size=(_P3, _T3, _J3)).astype(np.float32)
QUALITY3 = rng.normal(size=(_P3, _T3, _J3)).astype(np.float32)
_BETA_PRICE3 = -1.5 + 0.5 * rng.normal(size=_P3)
_U3 = (
    np.array([0.0, 0.5, -0.3])
    + 1.0 * QUALITY3
    + _BETA_PRICE3[:, None, None] * PRICE3
    + rng.gumbel(size=(_P3, _T3, _J3))
)
CHOICE3 = _U3.argmax(-1).astype(np.int32)


def mixed_logit(price, quality, choice):
    n_people, n_tasks, _ = price.shape
    asc = numpyro.sample("asc", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    beta_quality = numpyro.sample("beta_quality", dist.Normal(0.0, 2.0))
    mu_price = numpyro.sample("mu_price", dist.Normal(0.0, 2.0))
    sigma_price = numpyro.sample("sigma_price", dist.HalfNormal(1.0))
    people = numpyro.plate("people", n_people, dim=-2)
    with people:
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    beta_price = mu_price + sigma_price * z  # (people, 1)
    utility = jnp.concatenate([jnp.zeros(1), asc]) + beta_quality * quality + beta_price[..., None] * price
    with people, numpyro.plate("tasks", n_tasks, dim=-1):
        numpyro.sample("choice", dist.Categorical(logits=utility), obs=choice)


# 4. interval-censored log-logistic AFT: log T = 1.2 + 0.6 x + 0.4 Logistic, inspected at whole
# times 1..8, right-censored at 8 (upper = inf)
X4 = rng.normal(size=200).astype(np.float32)
_T4 = np.exp(1.2 + 0.6 * X4 + 0.4 * rng.logistic(size=200))
LOWER4 = np.minimum(np.floor(_T4), 8.0).astype(np.float32)
UPPER4 = np.where(_T4 < 8.0, np.ceil(_T4), np.inf).astype(np.float32)


def interval_censored(x, lower, upper):
    b0 = numpyro.sample("b0", dist.Normal(0.0, 3.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 2.0))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    mu = b0 + b1 * x
    has_lower = lower > 0
    has_upper = jnp.isfinite(upper)
    z_lower = (jnp.log(jnp.where(has_lower, lower, 1.0)) - mu) / s
    z_upper = (jnp.log(jnp.where(has_upper, upper, 1.0)) - mu) / s
    cdf_lower = jnp.where(has_lower, jax.nn.sigmoid(z_lower), 0.0)
    cdf_upper = jnp.where(has_upper, jax.nn.sigmoid(z_upper), 1.0)
    numpyro.factor("t", jnp.log(cdf_upper - cdf_lower).sum())


# 5. mixture cure model: 30% cured (never fail); the others Weibull(1.5, exp(1.0 + 0.5 x));
# follow-up Uniform(6, 12)
X5 = rng.normal(size=250).astype(np.float32)
_CURED5 = rng.uniform(size=250) < 0.3
_FAIL5 = np.where(_CURED5, np.inf, np.exp(1.0 + 0.5 * X5) * rng.weibull(1.5, size=250))
_FOLLOW5 = rng.uniform(6.0, 12.0, size=250)
TIME5 = np.minimum(_FAIL5, _FOLLOW5).astype(np.float32)
EVENT5 = (_FAIL5 <= _FOLLOW5).astype(np.int32)


def mixture_cure(x, time, event):
    cure = numpyro.sample("cure", dist.Beta(1.0, 1.0))
    k = numpyro.sample("k", dist.LogNormal(0.0, 1.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 1.0))
    log_scale = b0 + b1 * x
    u = jnp.exp(k * (jnp.log(time) - log_scale))  # (t / scale)^k
    log_pdf = jnp.log(k) - log_scale + (k - 1.0) * (jnp.log(time) - log_scale) - u
    log_lik = jnp.where(
        event == 1,
        jnp.log1p(-cure) + log_pdf,
        jnp.logaddexp(jnp.log(cure), jnp.log1p(-cure) - u),
    )
    numpyro.factor("t", log_lik.sum())


# 6. source unmixing: 25 samples, each a Dirichlet(1, 1, 1) mix of 3 known source profiles over
# 6 tracers, tracer-specific noise
SOURCES6 = np.array(
    [[10.0, 2.0, 5.0, 1.0, 8.0, 3.0], [3.0, 9.0, 1.0, 6.0, 2.0, 7.0], [6.0, 5.0, 9.0, 8.0, 1.0, 1.0]],
    np.float32,
)
_W6 = rng.dirichlet(np.ones(3), size=25)
_NOISE6 = np.array([0.3, 0.5, 0.4, 0.6, 0.3, 0.5])
Y6 = (_W6 @ SOURCES6 + _NOISE6 * rng.normal(size=(25, 6))).astype(np.float32)


def source_unmixing(sources, y):
    n_sources, n_tracers = sources.shape
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0).expand([n_tracers]).to_event(1))
    with numpyro.plate("samples", y.shape[0]):
        w = numpyro.sample("w", dist.Dirichlet(jnp.ones(n_sources)))
        numpyro.sample("y", dist.Normal(w @ sources, sigma).to_event(1), obs=y)


# 7. daily cycle, 8 days x 24 hours: 15 + 4 cos(2 pi h / 24 - phase_d) + N(0, 1.5), the day's phase
# VonMises(1.0, 20)
_D7 = 8
HOUR7 = np.tile(np.arange(24), _D7).astype(np.float32)
DAY7 = np.repeat(np.arange(_D7), 24).astype(np.int32)
_PHASE7 = rng.vonmises(1.0, 20.0, size=_D7)
Y7 = (15.0 + 4.0 * np.cos(2 * np.pi * HOUR7 / 24 - _PHASE7[DAY7]) + 1.5 * rng.normal(size=24 * _D7)).astype(
    np.float32
)


def daily_phase(hour, day, y):
    level = numpyro.sample("level", dist.Normal(0.0, 20.0))
    amplitude = numpyro.sample("amplitude", dist.HalfNormal(10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    # numpyro warns that circular sites suit continuous inference poorly (it suggests CircularReparam);
    # the phases here lie near 1 rad, far from the wrap at +-pi, so they stay on the circular support
    mean_phase = numpyro.sample("mean_phase", dist.VonMises(0.0, 0.1))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 0.1))
    with numpyro.plate("days", _D7):
        phase = numpyro.sample("phase", dist.VonMises(mean_phase, kappa))
    with numpyro.plate("hours", y.shape[0]):
        mu = level + amplitude * jnp.cos(2 * jnp.pi * hour / 24 - phase[day])
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


# 8. isotonic dose-response: 8 dose groups x 15, monotone means, noise 0.8
_MEANS8 = np.array([0.0, 0.2, 0.5, 1.2, 2.0, 2.3, 2.4, 2.5])
DOSE8 = np.repeat(np.arange(8), 15).astype(np.int32)
Y8 = (_MEANS8[DOSE8] + 0.8 * rng.normal(size=DOSE8.size)).astype(np.float32)


def isotonic(dose, y):
    mu = numpyro.sample(
        "mu", dist.TransformedDistribution(dist.Normal(0.0, 2.0).expand([8]).to_event(1), OrderedTransform())
    )
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu[dose], sigma), obs=y)


# 9. seemingly unrelated regressions: y1 = 1 + 0.8 x1, y2 = -0.5 - 0.6 x1 + 1.2 x2, errors with
# scales (1.0, 0.5) and correlation 0.6
X9 = rng.normal(size=(120, 2)).astype(np.float32)
_COV9 = np.array([[1.0, 0.6 * 0.5], [0.6 * 0.5, 0.25]])
_MU9 = np.stack([1.0 + 0.8 * X9[:, 0], -0.5 - 0.6 * X9[:, 0] + 1.2 * X9[:, 1]], -1)
Y9 = (_MU9 + rng.multivariate_normal(np.zeros(2), _COV9, size=120)).astype(np.float32)


def sur(x, y):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 2.5))
    b2 = numpyro.sample("b2", dist.Normal(0.0, 2.5).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0).expand([2]).to_event(1))
    l_corr = numpyro.sample("l_corr", dist.LKJCholesky(2, 2.0))
    numpyro.deterministic("rho", l_corr[1, 0])
    mu = jnp.stack([a[0] + b1 * x[:, 0], a[1] + x @ b2], -1)
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(mu, scale_tril=sigma[:, None] * l_corr), obs=y)


# 10. Hawkes process on [0, 150]: baseline 0.5, jump 0.8, decay 1.2 (branching ratio 2/3), by
# Ogata's thinning
_T10 = 150.0
_EVENTS10: list[float] = []
_t10 = 0.0
while True:
    _bound10 = 0.5 + 0.8 * np.exp(-1.2 * (_t10 - np.asarray(_EVENTS10))).sum()
    _t10 += rng.exponential(1.0 / _bound10)
    if _t10 > _T10:
        break
    _rate10 = 0.5 + 0.8 * np.exp(-1.2 * (_t10 - np.asarray(_EVENTS10))).sum()
    if rng.uniform() < _rate10 / _bound10:
        _EVENTS10.append(_t10)
TIMES10 = np.asarray(_EVENTS10, np.float32)
HORIZON10 = np.float32(_T10)


def hawkes(times, horizon):
    baseline = numpyro.sample("baseline", dist.LogNormal(0.0, 1.0))
    branching = numpyro.sample("branching", dist.Uniform(0.0, 1.0))
    decay = numpyro.sample("decay", dist.LogNormal(0.0, 1.0))
    jump = numpyro.deterministic("jump", branching * decay)
    lag = times[:, None] - times[None, :]
    earlier = jnp.tril(jnp.ones_like(lag, dtype=bool), k=-1)
    excitation = jnp.where(earlier, jnp.exp(-decay * jnp.where(earlier, lag, 0.0)), 0.0).sum(-1)
    log_intensity = jnp.log(baseline + jump * excitation).sum()
    compensator = baseline * horizon + branching * (1.0 - jnp.exp(-decay * (horizon - times))).sum()
    numpyro.factor("events", log_intensity - compensator)


# 11. shifted log-normal reaction times: non-decision time 0.25 s plus LogNormal(mu_c, 0.4),
# mu = (-1.0, -0.6) in two conditions, 100 each
COND11 = np.repeat([0, 1], 100).astype(np.int32)
RT11 = (0.25 + np.exp(np.array([-1.0, -0.6])[COND11] + 0.4 * rng.normal(size=200))).astype(np.float32)


def shifted_lognormal(cond, rt):
    ndt = numpyro.sample("ndt", dist.Uniform(0.0, jnp.min(rt)))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("trials", rt.shape[0]):
        numpyro.sample("rt", dist.LogNormal(mu[cond], sigma), obs=rt - ndt)


# 12. Cormack-Jolly-Seber: 120 animals first caught on occasions 1-5 of 7, survival
# logit(phi) = 0.8 + 0.5 weight, recapture probability 0.6
_N12, _K12 = 120, 7
WEIGHT12 = rng.normal(size=_N12).astype(np.float32)
_PHI12 = 1 / (1 + np.exp(-(0.8 + 0.5 * WEIGHT12)))
_FIRST12 = rng.integers(0, 5, size=_N12)
CAPTURE12 = np.zeros((_N12, _K12), np.int32)
for _i in range(_N12):
    CAPTURE12[_i, _FIRST12[_i]] = 1
    _alive = True
    for _k in range(_FIRST12[_i] + 1, _K12):
        _alive = _alive and rng.uniform() < _PHI12[_i]
        CAPTURE12[_i, _k] = int(_alive and rng.uniform() < 0.6)


def cjs(weight, capture):
    n, n_occasions = capture.shape
    a = numpyro.sample("a", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0))
    p = numpyro.sample("p", dist.Beta(1.0, 1.0))
    phi = jax.nn.sigmoid(a + b * weight)
    first = jnp.argmax(capture, axis=1)
    last = n_occasions - 1 - jnp.argmax(capture[:, ::-1], axis=1)
    detections = capture.sum(1) - 1
    # chi[i, m]: probability animal i, alive now, is never seen on the m occasions left
    chi = [jnp.ones(n)]
    for _ in range(n_occasions - 1):
        chi.append(1.0 - phi + phi * (1.0 - p) * chi[-1])
    chi = jnp.stack(chi, -1)
    never_again = jnp.take_along_axis(chi, (n_occasions - 1 - last)[:, None], axis=1)[:, 0]
    log_lik = (
        (last - first) * jnp.log(phi)
        + detections * jnp.log(p)
        + (last - first - detections) * jnp.log1p(-p)
        + jnp.log(never_again)
    )
    numpyro.factor("capture", log_lik.sum())


OUTLIER_MODELS = {
    "skew_normal": TextbookModel(
        "skew_normal", skew_normal, (X1, Y1), "skew-normal regression by a factor, latent skewness (200)"
    ),
    "gpd_exceedances": TextbookModel(
        "gpd_exceedances",
        gpd_exceedances,
        (X2, Y2),
        "generalized Pareto exceedances, log-linear scale, shape in (0, 1) (150)",
    ),
    "mixed_logit": TextbookModel(
        "mixed_logit",
        mixed_logit,
        (PRICE3, QUALITY3, CHOICE3),
        "mixed conditional logit, random price coefficient, 50 people x 10 tasks x 3 alternatives",
    ),
    "interval_censored": TextbookModel(
        "interval_censored",
        interval_censored,
        (X4, LOWER4, UPPER4),
        "interval-censored log-logistic AFT, right-censored at 8 (200)",
    ),
    "mixture_cure": TextbookModel(
        "mixture_cure",
        mixture_cure,
        (X5, TIME5, EVENT5),
        "mixture cure model, Weibull latency, censored, logaddexp by hand (250)",
    ),
    "source_unmixing": TextbookModel(
        "source_unmixing",
        source_unmixing,
        (SOURCES6, Y6),
        "source apportionment, a Dirichlet simplex per sample, 25 x 6 tracers x 3 sources",
    ),
    "daily_phase": TextbookModel(
        "daily_phase",
        daily_phase,
        (HOUR7, DAY7, Y7),
        "daily cycle, VonMises per-day phases around a circular mean, 8 x 24 (simulated)",
    ),
    "isotonic": TextbookModel(
        "isotonic",
        isotonic,
        (DOSE8, Y8),
        "monotone dose-response, ordered group means by OrderedTransform, 8 x 15 (simulated)",
    ),
    "sur": TextbookModel(
        "sur", sur, (X9, Y9), "seemingly unrelated regressions, LKJCholesky error correlation (120 x 2)"
    ),
    "hawkes": TextbookModel(
        "hawkes",
        hawkes,
        (TIMES10, HORIZON10),
        "Hawkes process, exponential kernel, branching ratio in (0, 1), horizon 150 (simulated)",
    ),
    "shifted_lognormal": TextbookModel(
        "shifted_lognormal",
        shifted_lognormal,
        (COND11, RT11),
        "shifted log-normal reaction times, shift under Uniform(0, min rt), 2 x 100 (simulated)",
    ),
    "cjs": TextbookModel(
        "cjs",
        cjs,
        (WEIGHT12, CAPTURE12),
        "Cormack-Jolly-Seber capture-recapture, survival on weight, 120 x 7 (simulated)",
    ),
}

"""Ten more NumPyro models, written in the seventieth session before anything was run on them with
grepvi: kinds the earlier sets lack, as an outside reviewer would write them to test a VI library
(data simulated with known parameters from a fixed seed of this module's own; each was checked
only with a short NUTS run):

* ``betabinomial_meta``: a random-effects meta-analysis of 20 two-arm studies, a beta-binomial
  count per arm (``concentration ~ Gamma(2, 0.02)``), a free logit baseline per study and a
  study log-odds ratio ``d + tau z_i`` (non-centred, ``tau ~ HalfNormal(0.5)``); one count per
  arm identifies the concentration only weakly (a long right tail).
* ``loglinear_table``: a Poisson log-linear model of a 3 x 4 x 2 contingency table with all
  main effects and two-way interactions (no three-way term), corner constraints (the first
  level's effects fixed at 0), 18 coefficients.
* ``gamma_glm``: a gamma GLM with a log link, two covariates and a varying intercept for 25
  groups (300 rows), non-centred, ``shape ~ Gamma(2, 0.5)``, ``y ~ Gamma(shape, shape / mu)``.
* ``censored_poisson``: Poisson regression on 150 counts recorded with a cap of 8 (a count of 8
  means ">= 8"): the uncapped rows under ``handlers.mask``, the capped ones' ``log P(Y >= 8)``
  (a regularized incomplete gamma function) as a ``numpyro.factor``.
* ``dose_response_4pl``: a four-parameter log-logistic dose-response curve (slope, lower and
  upper asymptotes, log ED50) on 8 doses x 4 replicates with Normal noise.
* ``graded_response``: Samejima's graded response model, 150 persons x 20 items with 4 ordered
  categories: ``theta_p ~ Normal(0, 1)``, discriminations ``LogNormal(0, 0.5)``, per-item
  ordered cutpoints (``OrderedTransform``), ``OrderedLogistic(a_j theta_p, cutpoints_j)``.
* ``latent_class``: a two-class latent class model (diagnostic tests without a gold standard)
  of 5 binary tests on 500 subjects, prevalence ``Beta(1, 1)``, sensitivities and
  specificities ``Beta(2, 1)``, the class summed out with ``logsumexp``.
* ``t_random_walk``: a local level with Student-t steps (occasional jumps) observed in Normal
  noise, 120 points, non-centred (``level = level0 + cumsum(tau e)``, ``e ~ StudentT(nu)``),
  ``nu ~ Gamma(2, 0.1)`` (120 points say little about ``nu``: its posterior is near the prior's).
* ``von_bertalanffy``: von Bertalanffy growth of 30 fish measured at 5 ages each, an asymptotic
  length per fish (log-normal around a population mean, non-centred), shared ``k`` and ``t0``.
* ``weibull_aft``: Weibull survival of 240 patients in 15 centres, an accelerated-failure-time
  log scale with two covariates and a Normal centre effect (non-centred), right censoring: the
  events' density under ``handlers.mask``, the censored rows' log survival as a factor.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["REVIEWER_MODELS"]

_RNG = np.random.default_rng(70)


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


# betabinomial_meta: 20 studies, two arms each
_META_STUDIES = 20
META_N = _RNG.integers(40, 300, size=(_META_STUDIES, 2)).astype(np.float32)
_META_BASE = _RNG.normal(-1.5, 0.6, size=_META_STUDIES)
_META_LOR = -0.4 + 0.25 * _RNG.normal(size=_META_STUDIES)
_META_P = _expit(np.stack([_META_BASE, _META_BASE + _META_LOR], axis=1))
_META_THETA = _RNG.beta(60.0 * _META_P, 60.0 * (1.0 - _META_P))
META_EVENTS = _RNG.binomial(META_N.astype(np.int64), _META_THETA).astype(np.float32)

# loglinear_table: a 3 x 4 x 2 table
_LL_A = np.array([0.0, 0.3, -0.2])
_LL_B = np.array([0.0, 0.5, 0.1, -0.4])
_LL_C = np.array([0.0, -0.6])
_LL_AB = np.pad(0.3 * _RNG.normal(size=(2, 3)), ((1, 0), (1, 0)))
_LL_AC = np.pad(np.array([[0.4], [-0.3]]), ((1, 0), (1, 0)))
_LL_BC = np.pad(np.array([[0.2], [0.5], [-0.3]]), ((1, 0), (1, 0)))
_LL_LOG_MU = (
    4.0
    + _LL_A[:, None, None]
    + _LL_B[None, :, None]
    + _LL_C[None, None, :]
    + _LL_AB[:, :, None]
    + _LL_AC[:, None, :]
    + _LL_BC[None, :, :]
)
LOGLINEAR_COUNTS = _RNG.poisson(np.exp(_LL_LOG_MU)).astype(np.float32)

# gamma_glm: 25 groups x 12 rows, two covariates
GAMMA_GROUP = np.repeat(np.arange(25), 12).astype(np.int32)
GAMMA_X = _RNG.normal(size=(300, 2)).astype(np.float32)
_GAMMA_MU = np.exp(1.0 + GAMMA_X @ np.array([0.5, -0.3]) + 0.4 * _RNG.normal(size=25)[GAMMA_GROUP])
GAMMA_Y = _RNG.gamma(3.0, _GAMMA_MU / 3.0).astype(np.float32)

# censored_poisson: 150 counts, two covariates, recorded with a cap of 8
CENSORED_CAP = np.float32(8.0)
CENSORED_X = _RNG.normal(size=(150, 2)).astype(np.float32)
_CENSORED_COUNTS = _RNG.poisson(np.exp(1.2 + CENSORED_X @ np.array([0.5, -0.3])))
CENSORED_Y = np.minimum(_CENSORED_COUNTS, CENSORED_CAP).astype(np.float32)
CENSORED_CAPPED = (_CENSORED_COUNTS >= CENSORED_CAP).astype(np.float32)

# dose_response_4pl: 8 doses x 4 replicates
DOSE = np.repeat(np.geomspace(0.05, 50.0, 8), 4).astype(np.float32)
_DOSE_MEAN = 5.0 + (100.0 - 5.0) / (1.0 + np.exp(1.5 * (np.log(DOSE) - np.log(2.0))))
DOSE_RESPONSE = (_DOSE_MEAN + 4.0 * _RNG.normal(size=DOSE.shape[0])).astype(np.float32)

# graded_response: 150 persons x 20 items, 4 categories (0-3)
_GRM_THETA = _RNG.normal(size=150)
_GRM_A = np.exp(0.3 * _RNG.normal(size=20))
_GRM_CUT = np.sort(_RNG.normal(0.0, 1.2, size=(20, 3)), axis=1) * _GRM_A[:, None]
_GRM_ETA = _GRM_THETA[:, None] * _GRM_A[None, :]
_GRM_CDF = _expit(_GRM_CUT[None, :, :] - _GRM_ETA[:, :, None])  # P(Y <= k), k = 0, 1, 2
GRM_Y = (_RNG.uniform(size=(150, 20))[:, :, None] > _GRM_CDF).sum(-1).astype(np.int32)

# latent_class: 500 subjects, 5 binary tests, prevalence 0.35
_LC_SENS = np.array([0.85, 0.8, 0.75, 0.9, 0.7])
_LC_SPEC = np.array([0.8, 0.7, 0.85, 0.65, 0.75])
_LC_CLASS = _RNG.uniform(size=500) < 0.35
_LC_P = np.where(_LC_CLASS[:, None], _LC_SENS[None, :], 1.0 - _LC_SPEC[None, :])
LATENT_CLASS_Y = (_RNG.uniform(size=(500, 5)) < _LC_P).astype(np.float32)

# t_random_walk: 120 points, Student-t(3) steps of scale 0.3, noise 0.5
_RW_LEVEL = 2.0 + np.cumsum(0.3 * _RNG.standard_t(3.0, size=120))
RW_Y = (_RW_LEVEL + 0.5 * _RNG.normal(size=120)).astype(np.float32)

# von_bertalanffy: 30 fish x 5 ages
VB_FISH = np.repeat(np.arange(30), 5).astype(np.int32)
VB_AGE = np.sort(_RNG.uniform(1.0, 12.0, size=(30, 5)), axis=1).ravel().astype(np.float32)
_VB_LINF = np.exp(np.log(60.0) + 0.1 * _RNG.normal(size=30))
VB_LENGTH = (_VB_LINF[VB_FISH] * (1.0 - np.exp(-0.25 * (VB_AGE + 0.5))) + 1.5 * _RNG.normal(size=150)).astype(
    np.float32
)

# weibull_aft: 15 centres x 16 patients, two covariates, shape 1.5, censoring at uniform times
AFT_CENTRE = np.repeat(np.arange(15), 16).astype(np.int32)
AFT_X = np.stack([_RNG.normal(size=240), _RNG.integers(0, 2, size=240)], axis=1).astype(np.float32)
_AFT_SCALE = np.exp(2.0 + AFT_X @ np.array([0.5, -0.4]) + 0.4 * _RNG.normal(size=15)[AFT_CENTRE])
_AFT_TIMES = _AFT_SCALE * _RNG.weibull(1.5, size=240)
_AFT_CENSOR = _RNG.uniform(5.0, 20.0, size=240)
AFT_TIME = np.minimum(_AFT_TIMES, _AFT_CENSOR).astype(np.float32)
AFT_EVENT = (_AFT_TIMES <= _AFT_CENSOR).astype(np.float32)


def betabinomial_meta(n, events):
    import jax
    import numpyro
    import numpyro.distributions as dist

    d = numpyro.sample("d", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(0.5))
    concentration = numpyro.sample("concentration", dist.Gamma(2.0, 0.02))
    with numpyro.plate("studies", n.shape[0]):
        baseline = numpyro.sample("baseline", dist.Normal(0.0, 2.0))
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
        log_odds_ratio = d + tau * z
        p_control = jax.nn.sigmoid(baseline)
        p_treated = jax.nn.sigmoid(baseline + log_odds_ratio)
        numpyro.sample(
            "control",
            dist.BetaBinomial(concentration * p_control, concentration * (1.0 - p_control), n[:, 0]),
            obs=events[:, 0],
        )
        numpyro.sample(
            "treated",
            dist.BetaBinomial(concentration * p_treated, concentration * (1.0 - p_treated), n[:, 1]),
            obs=events[:, 1],
        )


def loglinear_table(counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    i, j, k = counts.shape
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 5.0))
    a = numpyro.sample("a", dist.Normal(0.0, 2.0).expand([i - 1]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([j - 1]).to_event(1))
    c = numpyro.sample("c", dist.Normal(0.0, 2.0).expand([k - 1]).to_event(1))
    ab = numpyro.sample("ab", dist.Normal(0.0, 1.0).expand([i - 1, j - 1]).to_event(2))
    ac = numpyro.sample("ac", dist.Normal(0.0, 1.0).expand([i - 1, k - 1]).to_event(2))
    bc = numpyro.sample("bc", dist.Normal(0.0, 1.0).expand([j - 1, k - 1]).to_event(2))
    # corner constraints: the first level of each factor is the reference
    a = jnp.concatenate([jnp.zeros(1), a])
    b = jnp.concatenate([jnp.zeros(1), b])
    c = jnp.concatenate([jnp.zeros(1), c])
    ab = jnp.pad(ab, ((1, 0), (1, 0)))
    ac = jnp.pad(ac, ((1, 0), (1, 0)))
    bc = jnp.pad(bc, ((1, 0), (1, 0)))
    log_mu = (
        intercept
        + a[:, None, None]
        + b[None, :, None]
        + c[None, None, :]
        + ab[:, :, None]
        + ac[:, None, :]
        + bc[None, :, :]
    )
    numpyro.deterministic("expected", jnp.exp(log_mu))
    numpyro.sample("y", dist.Poisson(jnp.exp(log_mu)).to_event(3), obs=counts)


def gamma_glm(group, x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    shape = numpyro.sample("shape", dist.Gamma(2.0, 0.5))
    with numpyro.plate("groups", 25):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    mu = jnp.exp(b0 + x @ b + sigma * z[group])
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.Gamma(shape, shape / mu), obs=y)


def censored_poisson(x, y, capped, cap):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import gammainc

    a = numpyro.sample("a", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    rate = jnp.exp(a + x @ b)
    with numpyro.plate("rows", y.shape[0]):
        with numpyro.handlers.mask(mask=capped < 0.5):
            numpyro.sample("y", dist.Poisson(rate), obs=y)
    # P(Y >= cap) = P(Gamma(cap, 1) <= rate), the regularized lower incomplete gamma function
    numpyro.factor("capped", jnp.sum(capped * jnp.log(gammainc(cap, rate))))


def dose_response_4pl(dose, response):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    slope = numpyro.sample("slope", dist.LogNormal(0.0, 1.0))
    lower = numpyro.sample("lower", dist.Normal(0.0, 20.0))
    upper = numpyro.sample("upper", dist.Normal(100.0, 30.0))
    log_ed50 = numpyro.sample("log_ed50", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    mean = lower + (upper - lower) / (1.0 + jnp.exp(slope * (jnp.log(dose) - log_ed50)))
    numpyro.deterministic("ed50", jnp.exp(log_ed50))
    with numpyro.plate("wells", response.shape[0]):
        numpyro.sample("response", dist.Normal(mean, sigma), obs=response)


def graded_response(y):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions.transforms import OrderedTransform

    persons, items = y.shape
    categories = 4
    with numpyro.plate("items", items):
        a = numpyro.sample("a", dist.LogNormal(0.0, 0.5))
        cutpoints = numpyro.sample(
            "cutpoints",
            dist.TransformedDistribution(
                dist.Normal(0.0, 3.0).expand([categories - 1]).to_event(1), OrderedTransform()
            ),
        )
    with numpyro.plate("persons", persons):
        theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("persons_obs", persons, dim=-2), numpyro.plate("items_obs", items, dim=-1):
        numpyro.sample("y", dist.OrderedLogistic(theta[:, None] * a[None, :], cutpoints), obs=y)


def latent_class(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    prevalence = numpyro.sample("prevalence", dist.Beta(1.0, 1.0))
    with numpyro.plate("tests", y.shape[1]):
        sensitivity = numpyro.sample("sensitivity", dist.Beta(2.0, 1.0))
        specificity = numpyro.sample("specificity", dist.Beta(2.0, 1.0))
    # log p(y_i | class): positive class says 1 with the sensitivity, negative with 1 - specificity
    log_positive = jnp.sum(y * jnp.log(sensitivity) + (1.0 - y) * jnp.log1p(-sensitivity), axis=1)
    log_negative = jnp.sum(y * jnp.log1p(-specificity) + (1.0 - y) * jnp.log(specificity), axis=1)
    per_subject = logsumexp(
        jnp.stack([jnp.log(prevalence) + log_positive, jnp.log1p(-prevalence) + log_negative], axis=1),
        axis=1,
    )
    numpyro.factor("marginal", jnp.sum(per_subject))


def t_random_walk(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    n = y.shape[0]
    level0 = numpyro.sample("level0", dist.Normal(0.0, 5.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("steps", n - 1):
        e = numpyro.sample("e", dist.StudentT(nu, 0.0, 1.0))
    level = level0 + jnp.concatenate([jnp.zeros(1), jnp.cumsum(tau * e)])
    with numpyro.plate("time", n):
        numpyro.sample("y", dist.Normal(level, sigma), obs=y)


def von_bertalanffy(fish, age, length):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    mu_log_linf = numpyro.sample("mu_log_linf", dist.Normal(4.0, 1.0))
    sd_log_linf = numpyro.sample("sd_log_linf", dist.HalfNormal(0.5))
    k = numpyro.sample("k", dist.LogNormal(jnp.log(0.3), 1.0))
    t0 = numpyro.sample("t0", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("fish", 30):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    linf = jnp.exp(mu_log_linf + sd_log_linf * z)
    mean = linf[fish] * (1.0 - jnp.exp(-k * (age - t0)))
    with numpyro.plate("measurements", length.shape[0]):
        numpyro.sample("length", dist.Normal(mean, sigma), obs=length)


def weibull_aft(centre, x, time, event):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    shape = numpyro.sample("shape", dist.Gamma(2.0, 1.0))
    sigma_centre = numpyro.sample("sigma_centre", dist.HalfNormal(1.0))
    with numpyro.plate("centres", 15):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    scale = jnp.exp(b0 + x @ b + sigma_centre * z[centre])
    with numpyro.plate("patients", time.shape[0]):
        with numpyro.handlers.mask(mask=event > 0.5):
            numpyro.sample("time", dist.Weibull(scale, shape), obs=time)
    # censored patients: log S(t) = -(t / scale)^shape
    numpyro.factor("censored", -jnp.sum((1.0 - event) * (time / scale) ** shape))


REVIEWER_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "betabinomial_meta",
            betabinomial_meta,
            (META_N, META_EVENTS),
            "beta-binomial random-effects meta-analysis, 20 two-arm studies (simulated)",
        ),
        TextbookModel(
            "loglinear_table",
            loglinear_table,
            (LOGLINEAR_COUNTS,),
            "Poisson log-linear model, 3 x 4 x 2 table, two-way interactions (simulated)",
        ),
        TextbookModel(
            "gamma_glm",
            gamma_glm,
            (GAMMA_GROUP, GAMMA_X, GAMMA_Y),
            "gamma GLM, log link, varying intercept, 25 groups (simulated)",
        ),
        TextbookModel(
            "censored_poisson",
            censored_poisson,
            (CENSORED_X, CENSORED_Y, CENSORED_CAPPED, CENSORED_CAP),
            "Poisson regression, counts capped at 8, 150 rows (simulated)",
        ),
        TextbookModel(
            "dose_response_4pl",
            dose_response_4pl,
            (DOSE, DOSE_RESPONSE),
            "four-parameter log-logistic dose-response, 32 wells (simulated)",
        ),
        TextbookModel(
            "graded_response",
            graded_response,
            (GRM_Y,),
            "graded response model, 150 persons x 20 items, 4 categories (simulated)",
        ),
        TextbookModel(
            "latent_class",
            latent_class,
            (LATENT_CLASS_Y,),
            "two-class latent class model, 5 binary tests, 500 subjects (simulated)",
        ),
        TextbookModel(
            "t_random_walk",
            t_random_walk,
            (RW_Y,),
            "Student-t random walk in Normal noise, 120 points (simulated)",
        ),
        TextbookModel(
            "von_bertalanffy",
            von_bertalanffy,
            (VB_FISH, VB_AGE, VB_LENGTH),
            "von Bertalanffy growth, individual asymptotes, 30 fish x 5 ages (simulated)",
        ),
        TextbookModel(
            "weibull_aft",
            weibull_aft,
            (AFT_CENTRE, AFT_X, AFT_TIME, AFT_EVENT),
            "Weibull AFT, centre effects, right censoring, 240 patients (simulated)",
        ),
    )
}

"""Seven classic BUGS examples (the BUGS and WinBUGS example volumes; Spiegelhalter, Thomas,
Best & Gilks 1996) not in the other sets, written in the fifty-sixth session as a user would
write them in NumPyro (the BUGS code's priors, vague ones included), before anything was run
on them. Data from the
examples where it is short and published (Leuk, Beetles, Magnesium, Alligators, Hearts);
simulated with this module's own seed where it is long (Oxford, Dogs).

* ``leuk``: Cox regression by the counting process of Andersen & Gill (BUGS "Leuk"): the
  remission times of 42 leukaemia patients (Freireich et al. 1963; 6-MP against placebo, 12
  censored), the baseline hazard's 17 increments a gamma process ``dL0_j ~ Gamma(c r dt_j,
  c)`` with ``c = 0.001`` and ``r = 0.1`` (prior shapes 1e-4 to 1.2e-3: gamma latents at tiny
  prior shapes), ``beta ~ Normal(0, 1000)``.
* ``beetles``: Bliss's (1935) beetle mortality at 8 doses of carbon disulphide, a binomial
  with the complementary log-log link, vague normal priors (BUGS "Beetles").
* ``magnesium``: a random-effects meta-analysis of 8 trials of intravenous magnesium after
  myocardial infarction (Teo et al. 1991; BUGS "Magnesium"): the control arms' risks
  ``Uniform(0, 1)``, the trials' log odds ratios centred ``Normal(mu, tau)``, ``tau ~
  Uniform(0, 50)`` (one of the example's six priors on ``tau``).
* ``alligators``: the primary food choice of 219 alligators in 4 Florida lakes and 2 sizes
  over 5 foods (Agresti 1990; BUGS "Alligators"): a multinomial logit, the first food, lake
  and size the baseline, 20 effects under vague ``Normal(0, 316)`` priors.
* ``hearts``: premature ventricular contractions of 12 patients before and after a drug
  (Farewell & Sprott 1988; BUGS "Hearts"): a binomial mixed with a point mass at zero (the
  cured), the cure probability and the binomial's on the logit scale, ``Normal(0, 100)``.
* ``oxford``: the Oxford survey of childhood cancers (Breslow & Clayton 1993; BUGS "Oxford"),
  120 strata of matched case and control counts by year of birth, the strata's baselines
  under ``Normal(0, 1000)``, the log odds ratio quadratic in the year with a ``Normal(0,
  sigma)`` effect per stratum (simulated near the example's estimates: ``alpha`` 0.58, ``sigma``
  0.1).
* ``dogs``: Solomon & Wynne's avoidance learning, 30 dogs x 25 trials (BUGS "Dogs"): the
  probability of a shock ``A^avoidances B^shocks``, ``log A`` and ``log B`` each ``Uniform(-10,
  -1e-5)`` (a bounded negative support), a Bernoulli with probabilities by a log link
  (simulated at ``A = 0.79``, ``B = 0.92``, near the example's estimates).
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["BUGS_MODELS"]

_RNG = np.random.default_rng(56)

# leuk: remission weeks; treated (6-MP, Z = -0.5) and placebo (Z = +0.5); event 0 = censored
_TREATED = [
    (6, 1), (6, 1), (6, 1), (6, 0), (7, 1), (9, 0), (10, 1), (10, 0), (11, 0), (13, 1), (16, 1),
    (17, 0), (19, 0), (20, 0), (22, 1), (23, 1), (25, 0), (32, 0), (32, 0), (34, 0), (35, 0),
]  # fmt: skip
_PLACEBO = [(t, 1) for t in (1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23)]
LEUK_TIME = np.array([t for t, _ in _TREATED + _PLACEBO], np.float32)
LEUK_EVENT = np.array([e for _, e in _TREATED + _PLACEBO], np.float32)
LEUK_Z = np.array([-0.5] * 21 + [0.5] * 21, np.float32)
LEUK_T = np.array([1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 22, 23, 35], np.float32)
# at risk at the start of interval j, and failed inside it
LEUK_AT_RISK = (LEUK_TIME[:, None] >= LEUK_T[None, :-1]).astype(np.float32)
LEUK_FAILED = (
    LEUK_AT_RISK
    * LEUK_EVENT[:, None]
    * (LEUK_TIME[:, None] < LEUK_T[None, 1:])
).astype(np.float32)  # fmt: skip


def leuk(at_risk, failed, z, t):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    c, r = 0.001, 0.1
    beta = numpyro.sample("beta", dist.Normal(0.0, jnp.sqrt(1000.0)))
    dl0 = numpyro.sample("dL0", dist.Gamma(c * r * (t[1:] - t[:-1]), c))
    rate = at_risk * jnp.exp(beta * z)[:, None] * dl0[None, :]
    numpyro.sample("dN", dist.Poisson(rate + 1e-30), obs=failed)


BEETLES_DOSE = np.array([1.6907, 1.7242, 1.7552, 1.7842, 1.8113, 1.8369, 1.8610, 1.8839], np.float32)
BEETLES_N = np.array([59, 60, 62, 56, 63, 59, 62, 60], np.float32)
BEETLES_KILLED = np.array([6, 13, 18, 28, 52, 53, 61, 60], np.float32)


def beetles(dose, n, killed):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Normal(0.0, 31.6))
    beta = numpyro.sample("beta", dist.Normal(0.0, 31.6))
    eta = alpha + beta * (dose - jnp.mean(dose))
    p = -jnp.expm1(-jnp.exp(eta))  # the complementary log-log link
    numpyro.sample("r", dist.Binomial(n, probs=jnp.clip(p, 1e-7, 1 - 1e-7)), obs=killed)


MAGNESIUM_RT = np.array([1, 9, 2, 1, 10, 1, 1, 90], np.float32)
MAGNESIUM_NT = np.array([40, 135, 200, 48, 150, 59, 25, 1159], np.float32)
MAGNESIUM_RC = np.array([2, 23, 7, 1, 8, 9, 3, 118], np.float32)
MAGNESIUM_NC = np.array([36, 135, 200, 46, 148, 56, 23, 1157], np.float32)


def magnesium(rt, nt, rc, nc):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 316.0))
    tau = numpyro.sample("tau", dist.Uniform(0.0, 50.0))
    with numpyro.plate("trials", rt.shape[0]):
        pc = numpyro.sample("pc", dist.Uniform(0.0, 1.0))
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        logit_c = numpyro.deterministic("logit_c", jnp_logit(pc))
        numpyro.sample("rc", dist.Binomial(nc, logits=logit_c), obs=rc)
        numpyro.sample("rt", dist.Binomial(nt, logits=logit_c + theta), obs=rt)


def jnp_logit(p):
    import jax.numpy as jnp

    return jnp.log(p) - jnp.log1p(-p)


# alligators: [lake (Hancock, Oklawaha, Trafford, George), size (<= 2.3 m, > 2.3 m), food
# (fish, invertebrate, reptile, bird, other)]
ALLIGATORS = np.array(
    [
        [[23, 4, 2, 2, 8], [7, 0, 1, 3, 5]],
        [[5, 11, 1, 0, 3], [13, 8, 6, 1, 0]],
        [[5, 11, 2, 1, 5], [8, 7, 6, 3, 5]],
        [[16, 19, 1, 2, 3], [17, 1, 0, 1, 3]],
    ],
    np.float32,
)


def alligators(counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    lakes, sizes, foods = counts.shape
    alpha = numpyro.sample("alpha", dist.Normal(jnp.zeros(foods - 1), 316.0).to_event(1))
    beta = numpyro.sample("beta", dist.Normal(jnp.zeros((lakes - 1, foods - 1)), 316.0).to_event(2))
    gamma = numpyro.sample("gamma", dist.Normal(jnp.zeros((sizes - 1, foods - 1)), 316.0).to_event(2))
    # the baselines (first food, first lake, first size) are zero
    a = jnp.concatenate([jnp.zeros(1), alpha])
    b = jnp.concatenate([jnp.zeros((1, foods)), jnp.concatenate([jnp.zeros((lakes - 1, 1)), beta], 1)], 0)
    g = jnp.concatenate([jnp.zeros((1, foods)), jnp.concatenate([jnp.zeros((sizes - 1, 1)), gamma], 1)], 0)
    logits = a[None, None, :] + b[:, None, :] + g[None, :, :]
    numpyro.sample("X", dist.Multinomial(counts.sum(-1), logits=logits), obs=counts)


HEARTS_BEFORE = np.array([6, 9, 17, 22, 7, 5, 5, 14, 9, 7, 9, 51], np.float32)
HEARTS_AFTER = np.array([5, 2, 0, 0, 2, 1, 0, 0, 0, 0, 13, 0], np.float32)


def hearts(before, after):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    total = before + after
    delta = numpyro.sample("delta", dist.Normal(0.0, 100.0))  # logit of the cure probability
    beta = numpyro.sample("beta", dist.Normal(0.0, 100.0))  # logit of the binomial's
    log_cured = jax_log_sigmoid(delta)
    log_not = jax_log_sigmoid(-delta) + dist.Binomial(total, logits=beta).log_prob(after)
    log_lik = jnp.where(after == 0, jnp.logaddexp(log_cured, log_not), log_not)
    numpyro.factor("y", log_lik.sum())


def jax_log_sigmoid(x):
    import jax

    return jax.nn.log_sigmoid(x)


# oxford: 120 strata, year of birth -10 .. 10 (centred), cases and controls
_OX_YEAR = np.repeat(np.arange(-10, 11), 6)[:120].astype(np.float32)
_OX_MU = _RNG.normal(-2.5, 0.6, size=120)
_OX_LOG_PSI = 0.58 - 0.045 * _OX_YEAR + 0.007 * (_OX_YEAR**2 - 22) + 0.1 * _RNG.normal(size=120)
OXFORD_N0 = _RNG.integers(100, 600, size=120).astype(np.float32)
OXFORD_N1 = _RNG.integers(100, 600, size=120).astype(np.float32)
OXFORD_R0 = _RNG.binomial(OXFORD_N0.astype(int), 1 / (1 + np.exp(-_OX_MU))).astype(np.float32)
OXFORD_R1 = _RNG.binomial(OXFORD_N1.astype(int), 1 / (1 + np.exp(-(_OX_MU + _OX_LOG_PSI)))).astype(np.float32)
OXFORD_YEAR = _OX_YEAR


def oxford(year, r0, n0, r1, n1):
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Normal(0.0, 1000.0))
    beta1 = numpyro.sample("beta1", dist.Normal(0.0, 1000.0))
    beta2 = numpyro.sample("beta2", dist.Normal(0.0, 1000.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(1.0))
    with numpyro.plate("strata", year.shape[0]):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1000.0))
        b = numpyro.sample("b", dist.Normal(0.0, sigma))
        log_psi = alpha + beta1 * year + beta2 * (year**2 - 22.0) + b
        numpyro.sample("r0", dist.Binomial(n0, logits=mu), obs=r0)
        numpyro.sample("r1", dist.Binomial(n1, logits=mu + log_psi), obs=r1)


def _dogs(num_dogs=30, num_trials=25, a=0.79, b=0.92):
    log_a, log_b = np.log(a), np.log(b)
    shocked = np.zeros((num_dogs, num_trials), np.float32)
    for dog in range(num_dogs):
        avoided = shocks = 0
        for trial in range(num_trials):
            if trial == 0:
                shock = 1.0  # every dog is shocked on its first trial
            else:
                shock = float(_RNG.uniform() < np.exp(log_a * avoided + log_b * shocks))
            shocked[dog, trial] = shock
            shocks += shock
            avoided += 1 - shock
    return shocked


DOGS_SHOCKED = _dogs()


def dogs(shocked):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    previous_shocks = jnp.cumsum(shocked, axis=1) - shocked
    previous_avoidances = jnp.arange(shocked.shape[1])[None, :] - previous_shocks
    log_a = numpyro.sample("log_a", dist.Uniform(-10.0, -1e-5))
    log_b = numpyro.sample("log_b", dist.Uniform(-10.0, -1e-5))
    log_p = log_a * previous_avoidances[:, 1:] + log_b * previous_shocks[:, 1:]
    p = jnp.clip(jnp.exp(log_p), 1e-7, 1 - 1e-7)
    numpyro.sample("y", dist.Bernoulli(probs=p), obs=shocked[:, 1:])


BUGS_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "leuk",
            leuk,
            (LEUK_AT_RISK, LEUK_FAILED, LEUK_Z, LEUK_T),
            "Cox regression by a gamma process, 42 leukaemia patients (BUGS Leuk)",
        ),
        TextbookModel(
            "beetles",
            beetles,
            (BEETLES_DOSE, BEETLES_N, BEETLES_KILLED),
            "complementary log-log dose response, 8 doses (BUGS Beetles)",
        ),
        TextbookModel(
            "magnesium",
            magnesium,
            (MAGNESIUM_RT, MAGNESIUM_NT, MAGNESIUM_RC, MAGNESIUM_NC),
            "random-effects meta-analysis, 8 trials, tau ~ Uniform(0, 50) (BUGS Magnesium)",
        ),
        TextbookModel(
            "alligators",
            alligators,
            (ALLIGATORS,),
            "multinomial logit, 4 lakes x 2 sizes x 5 foods (BUGS Alligators)",
        ),
        TextbookModel(
            "hearts",
            hearts,
            (HEARTS_BEFORE, HEARTS_AFTER),
            "zero-inflated binomial, 12 patients (BUGS Hearts)",
        ),
        TextbookModel(
            "oxford",
            oxford,
            (OXFORD_YEAR, OXFORD_R0, OXFORD_N0, OXFORD_R1, OXFORD_N1),
            "matched binomial strata with a random log odds ratio, 120 strata (BUGS Oxford, simulated)",
        ),
        TextbookModel(
            "dogs",
            dogs,
            (DOGS_SHOCKED,),
            "avoidance learning by a log link, 30 dogs x 25 trials (BUGS Dogs, simulated)",
        ),
    )
}

"""Twelve NumPyro models for benchmarks: textbook ones with their published data, and simulated ones.

Each entry of :data:`MODELS` is a :class:`TextbookModel`: the NumPyro model function and its
arguments (the data). They are written as a new user would write them, from the literature,
not from grepvi's own models:

* ``pumps``: gamma-Poisson hierarchy of the failures of 10 power-plant pumps (Gaver &
  O'Muircheartaigh 1987; George, Makov & Smith 1993; the BUGS example "pumps"):
  ``alpha ~ Exponential(1)``, ``beta ~ Gamma(0.1, 1)``, ``theta_i ~ Gamma(alpha, beta)``,
  ``failures_i ~ Poisson(theta_i t_i)``.
* ``eight_schools``: the SAT coaching experiments (Rubin 1981; Gelman et al., BDA3 Section
  5.5), non-centred: ``mu ~ Normal(0, 5)``, ``tau ~ HalfCauchy(5)``,
  ``theta_tilde_j ~ Normal(0, 1)``, ``y_j ~ Normal(mu + tau theta_tilde_j, sigma_j)``.
* ``rat_tumors``: beta-binomial hierarchy of 71 historical control groups of rats (Tarone
  1982; BDA3 Section 5.3, Table 5.1): ``phi ~ Beta(1, 1)`` (the population mean),
  ``kappa ~ Exponential(0.01)`` (its concentration ``alpha + beta``), ``theta_j ~ Beta(phi
  kappa, (1 - phi) kappa)``, ``y_j ~ Binomial(n_j, theta_j)``.
* ``mendel``: Dirichlet-multinomial of Mendel's (1866) dihybrid cross, 556 peas (round
  yellow, round green, wrinkled yellow, wrinkled green): ``p ~ Dirichlet(1, 1, 1, 1)``,
  ``counts ~ Multinomial(556, p)``; conjugate, the posterior is ``Dirichlet(1 + counts)``
  and :func:`mendel_log_evidence` is the exact log evidence.

Two models of the same kinds at a size no textbook prints, on data simulated with a fixed seed
(the thirteenth session wrote them to test the default procedure off its home ground):

* ``claims``: the pumps' gamma-Poisson hierarchy over 1,000 groups (say, insurance policies
  with exposures 0.5-20 years and rates drawn from Gamma(1.5, 2)).
* ``logistic``: Bayesian logistic regression, 2,000 rows and 20 standard-normal features,
  ``intercept ~ Normal(0, 5)``, ``w ~ Normal(0, 1)``.

Six more, written in the fourteenth session as a new user would write them, to test the
defaults on models the project had not tuned on (four of the six were slower than NUTS and SVI
there, one 70 times):

* ``baseball``: Efron & Morris's (1975) 18 players, hits in their first 45 at-bats, a
  beta-binomial hierarchy with other priors than rat tumours': ``phi ~ Uniform(0, 1)``,
  ``kappa ~ Pareto(1, 1.5)`` (the Stan case study's), ``theta_j ~ Beta(phi kappa, (1 - phi)
  kappa)``.
* ``negative_binomial``: overdispersed count regression, 500 rows x 5 features (simulated),
  ``phi ~ Gamma(2, 0.1)``, ``y ~ NegativeBinomial2(exp(b0 + x b), phi)``.
* ``weibull``: Weibull survival regression, 400 rows x 4 features (simulated), ``k ~ Gamma(2,
  1)``, ``t ~ Weibull(exp(b0 + x b), k)``.
* ``horseshoe``: sparse linear regression with the horseshoe prior (Carvalho, Polson & Scott
  2010), 100 rows x 30 features, three non-zero (simulated): ``tau, lambda_j ~ HalfCauchy(1)``,
  ``beta_j = z_j lambda_j tau``, ``z_j ~ Normal(0, 1)``. Only the product is identified: the
  mean-field ELBO is nearly flat along ``z lambda tau = const``.
* ``stochastic_volatility``: a random-walk log volatility over 300 days (simulated), Student-t
  returns, non-centred: ``h = cumsum(sigma eps) - 9``, ``r_t ~ StudentT(nu, 0, exp(h_t / 2))``.
* ``dirichlet_counts``: 50 documents' counts over 6 words with a shared gamma concentration,
  ``alpha_k ~ Gamma(1, 1)``, ``p_d ~ Dirichlet(alpha)``, ``c_d ~ Multinomial(n_d, p_d)``.
"""

from typing import Any, NamedTuple

import numpy as np

# ALL_MODELS holds fresh_models.py's and unseen_models.py's too (and every later set's)
__all__ = ["TextbookModel", "MODELS", "LARGER_MODELS", "ALL_MODELS", "mendel_log_evidence"]

PUMP_FAILURES = np.array([5, 1, 5, 14, 3, 19, 1, 1, 4, 22], np.float32)
PUMP_TIMES = np.array([94.3, 15.7, 62.9, 126.0, 5.24, 31.4, 1.05, 1.05, 2.1, 10.5], np.float32)

SCHOOL_EFFECTS = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
SCHOOL_SES = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)

# BDA3 Table 5.1 (the 71st experiment is the current one, 4 of 14); the same arrays as the zoo's
# (grepvi/interop/numpyro_zoo.py, checked against github.com/avehtari/BDA_py_demos
# demos_ch5/demo5_1.py and pymc-devs/pymc-examples' GLM-hierarchical-binomial-model).
RAT_TUMORS = np.array(
    [0] * 14
    + [1] * 8
    + [2] * 9
    + [1, 5, 2, 5, 3, 2, 7, 7, 3, 3, 2, 9, 10, 4, 4, 4, 4, 4, 4, 4, 10]
    + [4, 4, 4, 5, 11, 12, 5, 5, 6, 5, 6, 6, 6, 6, 16, 15, 15, 9, 4],
    np.float32,
)
RAT_GROUP_SIZES = np.array(
    [20, 20, 20, 20, 20, 20, 20, 19, 19, 19, 19, 18, 18, 17, 20, 20, 20, 20, 19, 19, 18, 18, 25, 24]
    + [23, 20, 20, 20, 20, 20, 20, 10, 49, 19, 46, 27, 17, 49, 47, 20, 20, 13, 48, 50, 20, 20, 20, 20]
    + [20, 20, 20, 48, 19, 19, 19, 22, 46, 49, 20, 20, 23, 19, 22, 20, 20, 20, 52, 46, 47, 24, 14],
    np.float32,
)

MENDEL_COUNTS = np.array([315.0, 108.0, 101.0, 32.0], np.float32)


def pumps(failures, times):
    """The zoo's pumps model (:func:`grepvi.interop.numpyro_zoo.pumps_model`), one definition."""
    from grepvi.interop.numpyro_zoo import pumps_model

    return pumps_model(failures, times)


def eight_schools(effects, standard_errors):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", effects.shape[0]):
        theta_tilde = numpyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + tau * theta_tilde, standard_errors), obs=effects)


def rat_tumors(tumors, group_sizes):
    import numpyro
    import numpyro.distributions as dist

    phi = numpyro.sample("phi", dist.Beta(1.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Exponential(0.01))
    with numpyro.plate("experiment", tumors.shape[0]):
        theta = numpyro.sample("theta", dist.Beta(phi * kappa, (1.0 - phi) * kappa))
        numpyro.sample("y", dist.Binomial(group_sizes, probs=theta), obs=tumors)


def mendel(counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(counts.shape[-1])))
    numpyro.sample("counts", dist.Multinomial(total_count=counts.sum(), probs=p), obs=counts)


def mendel_log_evidence(counts=MENDEL_COUNTS) -> float:
    """``log p(counts)`` of :func:`mendel` (the multinomial coefficient included)."""
    from scipy.special import gammaln

    counts = np.asarray(counts, np.float64)
    k, total = counts.size, counts.sum()
    coefficient = gammaln(total + 1) - gammaln(counts + 1).sum()
    return float(coefficient + gammaln(k) - gammaln(k + total) + gammaln(1 + counts).sum())


def logistic(x, y):
    import numpyro
    import numpyro.distributions as dist

    intercept = numpyro.sample("intercept", dist.Normal(0.0, 5.0))
    with numpyro.plate("feature", x.shape[1]):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=intercept + x @ w), obs=y)


def simulated_claims(num_groups=1000, seed=0):
    """``(counts, exposure)`` of ``claims`` (the pumps' model, :func:`pumps`): rates ~ Gamma(1.5,
    2), exposures ~ U(0.5, 20)."""
    rng = np.random.default_rng(seed)
    exposure = rng.uniform(0.5, 20.0, num_groups).astype(np.float32)
    rates = rng.gamma(1.5, 1.0 / 2.0, num_groups)
    return rng.poisson(rates * exposure).astype(np.float32), exposure


def simulated_logistic(num_rows=2000, num_features=20, seed=0):
    """``(x, y)`` of ``logistic``: weights ~ Normal(0, 0.5^2), intercept -0.3."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, num_features)).astype(np.float32)
    w = rng.normal(size=num_features) * 0.5
    y = (rng.random(num_rows) < 1 / (1 + np.exp(-(x @ w - 0.3)))).astype(np.float32)
    return x, y


# Efron & Morris (1975), Table 1: hits in the first 45 at-bats of the 1970 season
BASEBALL_HITS = np.array([18, 17, 16, 15, 14, 14, 13, 12, 11, 11, 10, 10, 10, 10, 10, 9, 8, 7], np.float32)
BASEBALL_AT_BATS = np.full(18, 45.0, np.float32)


def baseball(hits, at_bats):
    """The zoo's rat-tumour model (:func:`grepvi.interop.numpyro_zoo.rats_model`: the Stan case
    study's priors), one definition, on Efron & Morris's data."""
    from grepvi.interop.numpyro_zoo import rats_model

    return rats_model(hits, at_bats)


def negative_binomial(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    phi = numpyro.sample("phi", dist.Gamma(2.0, 0.1))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    with numpyro.plate("feature", x.shape[1]):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.NegativeBinomial2(jnp.exp(b0 + x @ b), phi), obs=y)


def simulated_negative_binomial(num_rows=500, num_features=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, num_features)).astype(np.float32)
    mean = np.exp(1.0 + x @ (0.3 * rng.normal(size=num_features)))
    return x, rng.poisson(rng.gamma(4.0, mean / 4.0)).astype(np.float32)


def weibull(x, t):
    """The zoo's Weibull regression (:func:`grepvi.interop.numpyro_zoo.weibull_model`), one definition."""
    from grepvi.interop.numpyro_zoo import weibull_model

    return weibull_model(x, t)


def simulated_weibull(num_rows=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, 4)).astype(np.float32)
    scale = np.exp(0.5 + x @ np.array([0.5, -0.3, 0.0, 0.2]))
    return x, (scale * rng.weibull(1.5, num_rows)).astype(np.float32)


def horseshoe(x, y):
    import numpyro
    import numpyro.distributions as dist

    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("feature", x.shape[1]):
        lam = numpyro.sample("lambda", dist.HalfCauchy(1.0))
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ (z * lam * tau), sigma), obs=y)


def simulated_horseshoe(num_rows=100, num_features=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, num_features)).astype(np.float32)
    beta = np.zeros(num_features)
    beta[:3] = [2.0, -1.5, 1.0]
    return x, (x @ beta + rng.normal(size=num_rows)).astype(np.float32)


def stochastic_volatility(returns):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    sigma = numpyro.sample("sigma", dist.Exponential(10.0))
    nu = numpyro.sample("nu", dist.Exponential(0.1))
    with numpyro.plate("day", returns.shape[0]):
        eps = numpyro.sample("eps", dist.Normal(0.0, 1.0))
    log_volatility = jnp.cumsum(sigma * eps) - 9.0
    with numpyro.plate("observed_day", returns.shape[0]):
        numpyro.sample("r", dist.StudentT(nu, 0.0, jnp.exp(log_volatility / 2)), obs=returns)


def simulated_returns(num_days=300, seed=0):
    rng = np.random.default_rng(seed)
    log_volatility = np.cumsum(0.15 * rng.normal(size=num_days)) - 9.0
    return ((rng.standard_t(8, size=num_days) * np.exp(log_volatility / 2)).astype(np.float32),)


def dirichlet_counts(counts):
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0).expand([counts.shape[1]]).to_event(1))
    with numpyro.plate("document", counts.shape[0]):
        p = numpyro.sample("p", dist.Dirichlet(alpha))
        numpyro.sample("counts", dist.Multinomial(total_count=counts.sum(-1), probs=p), obs=counts)


def simulated_counts(num_documents=50, num_words=6, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(rng.gamma(2.0, 1.0, num_words), num_documents)
    n = rng.integers(20, 60, num_documents)
    return (np.stack([rng.multinomial(n[d], p[d]) for d in range(num_documents)]).astype(np.float32),)


def hierarchical_logistic(x, group, y, num_groups):
    """Varying-intercept logistic regression (Gelman & Hill 2007, ch. 14), non-centred:
    ``mu ~ Normal(0, 2)``, ``sigma ~ HalfNormal(1)``, ``a_g ~ Normal(0, 1)``, ``w ~ Normal(0,
    1)``, ``y ~ Bernoulli(logit = mu + sigma a_group + x w)``."""
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("group", num_groups):
        a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    with numpyro.plate("feature", x.shape[1]):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=mu + sigma * a[group] + x @ w), obs=y)


def simulated_grouped_rows(num_rows=10_000, num_groups=200, num_features=10, seed=0):
    """``(x, group, y)`` of :func:`hierarchical_logistic`: intercepts ~ Normal(-0.5, 0.8^2),
    weights ~ Normal(0, 0.5^2)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, num_features)).astype(np.float32)
    group = rng.integers(0, num_groups, num_rows).astype(np.int32)
    a = rng.normal(-0.5, 0.8, num_groups)
    w = rng.normal(size=num_features) * 0.5
    y = (rng.random(num_rows) < 1 / (1 + np.exp(-(a[group] + x @ w)))).astype(np.float32)
    return x, group, y


class TextbookModel(NamedTuple):
    name: str
    model: Any
    args: tuple
    description: str


MODELS = {
    "pumps": TextbookModel(
        "pumps", pumps, (PUMP_FAILURES, PUMP_TIMES), "gamma-Poisson hierarchy, 10 pumps (George et al. 1993)"
    ),
    "eight_schools": TextbookModel(
        "eight_schools",
        eight_schools,
        (SCHOOL_EFFECTS, SCHOOL_SES),
        "eight schools, non-centred (Rubin 1981)",
    ),
    "rat_tumors": TextbookModel(
        "rat_tumors",
        rat_tumors,
        (RAT_TUMORS, RAT_GROUP_SIZES),
        "beta-binomial hierarchy, 71 experiments (BDA3 5.3)",
    ),
    "mendel": TextbookModel("mendel", mendel, (MENDEL_COUNTS,), "Dirichlet-multinomial, Mendel's peas"),
    "claims": TextbookModel(
        "claims", pumps, simulated_claims(), "gamma-Poisson hierarchy, 1,000 groups (simulated)"
    ),
    "logistic": TextbookModel(
        "logistic", logistic, simulated_logistic(), "logistic regression, 2,000 x 20 (simulated)"
    ),
    "baseball": TextbookModel(
        "baseball",
        baseball,
        (BASEBALL_HITS, BASEBALL_AT_BATS),
        "beta-binomial hierarchy, 18 players (Efron & Morris 1975)",
    ),
    "negative_binomial": TextbookModel(
        "negative_binomial",
        negative_binomial,
        simulated_negative_binomial(),
        "negative-binomial regression, 500 x 5 (simulated)",
    ),
    "weibull": TextbookModel(
        "weibull", weibull, simulated_weibull(), "Weibull survival regression, 400 x 4 (simulated)"
    ),
    "horseshoe": TextbookModel(
        "horseshoe", horseshoe, simulated_horseshoe(), "horseshoe regression, 100 x 30 (simulated)"
    ),
    "stochastic_volatility": TextbookModel(
        "stochastic_volatility",
        stochastic_volatility,
        simulated_returns(),
        "stochastic volatility, 300 days (simulated)",
    ),
    "dirichlet_counts": TextbookModel(
        "dirichlet_counts",
        dirichlet_counts,
        simulated_counts(),
        "gamma-Dirichlet-multinomial hierarchy, 50 x 6 (simulated)",
    ),
}

# Larger versions of the kinds above (not in the default run of the benchmarks): how the
# defaults scale against SVI and NUTS where the latents number in the thousands.
LARGER_MODELS = {
    "claims_10k": TextbookModel(
        "claims_10k",
        pumps,
        simulated_claims(num_groups=10_000),
        "gamma-Poisson hierarchy, 10,000 groups (simulated)",
    ),
    "hierarchical_logistic": TextbookModel(
        "hierarchical_logistic",
        lambda x, group, y: hierarchical_logistic(x, group, y, 200),
        simulated_grouped_rows(),
        "varying-intercept logistic regression, 10,000 rows, 200 groups x 10 features (simulated)",
    ),
    "logistic_100k": TextbookModel(
        "logistic_100k",
        logistic,
        simulated_logistic(num_rows=100_000, num_features=10),
        "logistic regression, 100,000 x 10 (simulated)",
    ),
}


def _all_models():
    from applied_models import APPLIED_MODELS
    from blind_models import BLIND_MODELS
    from bugs_models import BUGS_MODELS
    from classic_models import CLASSIC_MODELS
    from corner_models import CORNER_MODELS
    from discrete_models import DISCRETE_MODELS
    from edge_models import EDGE_MODELS
    from example_models import EXAMPLE_MODELS
    from fresh_models import FRESH_MODELS  # written after this module's models, on its TextbookModel
    from frontier_models import FRONTIER_MODELS
    from held_out_models import HELD_OUT_MODELS
    from medium_models import MEDIUM_MODELS
    from moving_support_models import MOVING_MODELS
    from outlier_models import OUTLIER_MODELS
    from outsider_models import OUTSIDER_MODELS
    from probe_models import PROBE_MODELS
    from rethinking_models import RETHINKING_MODELS
    from reviewer_models import REVIEWER_MODELS
    from ridge_models import RIDGE_MODELS
    from scale_models import SCALE_MODELS
    from stranger_models import STRANGER_MODELS
    from support_models import SUPPORT_MODELS
    from tutorial_models import TUTORIAL_MODELS
    from unseen_models import UNSEEN_MODELS
    from user_models import USER_MODELS

    later = {
        **FRESH_MODELS,
        **UNSEEN_MODELS,
        **USER_MODELS,
        **PROBE_MODELS,
        **CLASSIC_MODELS,
        **HELD_OUT_MODELS,
        **EXAMPLE_MODELS,
        **SUPPORT_MODELS,
        **BLIND_MODELS,
        **CORNER_MODELS,
        **EDGE_MODELS,
        **FRONTIER_MODELS,
        **OUTLIER_MODELS,
        **BUGS_MODELS,
        **TUTORIAL_MODELS,
        **APPLIED_MODELS,
        **RETHINKING_MODELS,
        **RIDGE_MODELS,
        **SCALE_MODELS,
        **MEDIUM_MODELS,
        **MOVING_MODELS,
        **REVIEWER_MODELS,
        **OUTSIDER_MODELS,
        **STRANGER_MODELS,
        **DISCRETE_MODELS,
    }
    return {**MODELS, **LARGER_MODELS, **later}


ALL_MODELS = _all_models()

assert RAT_TUMORS.size == RAT_GROUP_SIZES.size == 71 and RAT_TUMORS[-1] == 4 and RAT_GROUP_SIZES[-1] == 14

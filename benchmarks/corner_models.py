"""Twenty-three NumPyro models written in the forty-eighth session, before grepvi was run on them:
distributions and structures no other benchmark set used (Gumbel, folded Student-t,
``ImproperUniform``, ``BetaProportion``, ``DirichletMultinomial``, ``MultivariateStudentT``,
``Geometric``, a ``Logistic`` latent, ``LKJ`` correlation matrices, two crossed plates, a
``lax.scan`` growth curve) and patterns of users' code that fail in corners of ``q`` (a
censored Weibull through ``jnp.where``, an unclipped beta regression, vague priors on large
covariates). Simulated data, seed 48.

``python benchmarks/time_to_answer.py --corners`` runs them. Two of them failed with the
defaults before that session's changes: ``censored_weibull`` (``NumericalError``: every step
held a draw whose gradient was ``0 * inf``) and ``logistic_growth`` (a mode 76 nats below
NUTS's, from an exponential start); of the last eight, one (``pk_oral``: its density is
NaN where ``ka`` and ``ke`` both start at 1, so ``fit`` refused it); see ``docs/optimization.md`` and
``docs/numpyro.md``. The last eight (seed 4848) were written after the first fifteen had run.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from textbook_models import TextbookModel

__all__ = ["CORNER_MODELS"]

rng = np.random.default_rng(48)

# 1. Gumbel extreme-value regression, scale with a folded Student-t prior
X1 = rng.normal(size=60).astype(np.float32)
Y1 = (1.0 + 0.5 * X1 + rng.gumbel(0, 0.7, size=60)).astype(np.float32)


def gumbel_regression(x, y):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    s = numpyro.sample("s", dist.FoldedDistribution(dist.StudentT(3.0, 0.0, 1.0)))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Gumbel(a + b * x, s), obs=y)


# 2. improper flat priors
Y2 = rng.normal(3.0, 2.0, size=40).astype(np.float32)


def improper(y):
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


# 3. beta-proportion regression
X3 = rng.normal(size=80).astype(np.float32)
M3 = 1 / (1 + np.exp(-(0.3 + 0.8 * X3)))
Y3 = np.clip(rng.beta(M3 * 20, (1 - M3) * 20), 1e-4, 1 - 1e-4).astype(np.float32)


def beta_proportion(x, y):
    a = numpyro.sample("a", dist.Normal(0, 2))
    b = numpyro.sample("b", dist.Normal(0, 2))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 0.1))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample(
            "y", dist.BetaProportion(jnp.clip(1 / (1 + jnp.exp(-(a + b * x))), 1e-5, 1 - 1e-5), kappa), obs=y
        )


# 4. Dirichlet-multinomial observations with a Dirichlet mean and a gamma concentration
P4 = rng.dirichlet(np.ones(5) * 3)
C4 = np.stack([rng.multinomial(40, rng.dirichlet(P4 * 15)) for _ in range(30)]).astype(np.float32)


def dirichlet_multinomial(counts):
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(counts.shape[1])))
    conc = numpyro.sample("conc", dist.Gamma(2.0, 0.1))
    with numpyro.plate("n", counts.shape[0]):
        numpyro.sample("c", dist.DirichletMultinomial(conc * p, total_count=40), obs=counts)


# 5. multivariate Student-t location and scale
L5 = np.array([[1.0, 0.0], [0.6, 0.8]])
Y5 = (rng.standard_t(5, size=(50, 2)) @ L5.T + np.array([1.0, -1.0])).astype(np.float32)


def multivariate_t(y):
    loc = numpyro.sample("loc", dist.Normal(jnp.zeros(2), 10.0).to_event(1))
    scale = numpyro.sample("scale", dist.HalfNormal(jnp.ones(2) * 3).to_event(1))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MultivariateStudentT(5.0, loc, jnp.diag(scale)), obs=y)


# 6. geometric counts, logistic-scale random effects
G6 = rng.integers(0, 6, size=12)  # unused; drawn so that the data after it stay as first generated
Y6 = (rng.geometric(0.35, size=120) - 1).astype(np.float32)
GR6 = rng.integers(0, 6, size=120)


def geometric_groups(group, y):
    mu = numpyro.sample("mu", dist.Normal(0, 2))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("g", 6):
        u = numpyro.sample("u", dist.Logistic(0.0, 1.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Geometric(logits=mu + tau * u[group]), obs=y)


# 7. LKJ correlation matrix (not Cholesky) with multivariate normal data
C7 = np.array([[1, 0.5, -0.3], [0.5, 1, 0.2], [-0.3, 0.2, 1]])
Y7 = rng.multivariate_normal(np.zeros(3), C7, size=60).astype(np.float32)


def lkj_corr(y):
    corr = numpyro.sample("corr", dist.LKJ(3, 2.0))
    sd = numpyro.sample("sd", dist.HalfNormal(jnp.ones(3) * 2).to_event(1))
    cov = corr * sd[:, None] * sd[None, :]
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(3), cov), obs=y)


# 8. Weibull survival, latent shape in a Pareto-tailed prior, right censoring by a factor
T8 = rng.weibull(1.5, size=70).astype(np.float32) * 2.0
CENS8 = T8 > 3.0
T8 = np.minimum(T8, 3.0).astype(np.float32)


def censored_weibull(t, censored):
    k = numpyro.sample("k", dist.LogNormal(0.0, 1.0))
    lam = numpyro.sample("lam", dist.Gamma(2.0, 1.0))
    d = dist.Weibull(lam, k)
    with numpyro.plate("n", t.shape[0]):
        numpyro.factor("lik", jnp.where(censored, jnp.log1p(-d.cdf(t)), d.log_prob(t)))


# 9. Laplace-prior sparse Poisson regression with an exposure
X9 = rng.normal(size=(100, 6)).astype(np.float32)
E9 = rng.uniform(0.5, 2, size=100).astype(np.float32)
Y9 = rng.poisson(E9 * np.exp(0.3 + X9 @ np.array([0.8, 0, 0, -0.5, 0, 0]))).astype(np.float32)


def sparse_poisson(x, exposure, y):
    lam = numpyro.sample("lam", dist.Gamma(1.0, 1.0))
    b0 = numpyro.sample("b0", dist.Normal(0, 3))
    beta = numpyro.sample("beta", dist.Laplace(jnp.zeros(x.shape[1]), 1.0 / lam).to_event(1))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Poisson(exposure * jnp.exp(b0 + x @ beta)), obs=y)


# 10. inverse-gamma variance components, two crossed factors, Normal data
A10 = rng.integers(0, 5, size=90)
B10 = rng.integers(0, 4, size=90)
Y10 = (2 + rng.normal(0, 1, 5)[A10] + rng.normal(0, 0.5, 4)[B10] + rng.normal(0, 0.8, 90)).astype(np.float32)


def variance_components(a_idx, b_idx, y):
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    va = numpyro.sample("va", dist.InverseGamma(2.0, 1.0))
    vb = numpyro.sample("vb", dist.InverseGamma(2.0, 1.0))
    ve = numpyro.sample("ve", dist.InverseGamma(2.0, 1.0))
    with numpyro.plate("A", 5):
        ua = numpyro.sample("ua", dist.Normal(0, jnp.sqrt(va)))
    with numpyro.plate("B", 4):
        ub = numpyro.sample("ub", dist.Normal(0, jnp.sqrt(vb)))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + ua[a_idx] + ub[b_idx], jnp.sqrt(ve)), obs=y)


PROBES_FIRST = {
    "gumbel_regression": (gumbel_regression, (X1, Y1)),
    "improper": (improper, (Y2,)),
    "beta_proportion": (beta_proportion, (X3, Y3)),
    "dirichlet_multinomial": (dirichlet_multinomial, (C4,)),
    "multivariate_t": (multivariate_t, (Y5,)),
    "geometric_groups": (geometric_groups, (GR6, Y6)),
    "lkj_corr": (lkj_corr, (Y7,)),
    "censored_weibull": (censored_weibull, (T8, CENS8)),
    "sparse_poisson": (sparse_poisson, (X9, E9, Y9)),
    "variance_components": (variance_components, (A10, B10, Y10)),
}

# 11. Poisson regression with large covariates and a vague prior: exp overflows in q's tails
X11 = (rng.normal(size=(150, 3)) * np.array([1.0, 5.0, 10.0])).astype(np.float32)
Y11 = rng.poisson(np.exp(0.5 + X11 @ np.array([0.3, 0.1, -0.05]))).astype(np.float32)


def poisson_large_x(x, y):
    b0 = numpyro.sample("b0", dist.Normal(0, 10))
    beta = numpyro.sample("beta", dist.Normal(jnp.zeros(3), 10.0).to_event(1))
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(b0 + x @ beta)), obs=y)


# 12. two crossed plates (dim=-2): a row x column interaction table of Normal data
Y12 = (rng.normal(size=(6, 5)) + np.arange(6)[:, None] * 0.3 - np.arange(5)[None, :] * 0.2).astype(np.float32)


def two_way_table(y):
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    s_row = numpyro.sample("s_row", dist.HalfNormal(2.0))
    s_col = numpyro.sample("s_col", dist.HalfNormal(2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("col", y.shape[1], dim=-1):
        c = numpyro.sample("c", dist.Normal(0, s_col))
    with numpyro.plate("row", y.shape[0], dim=-2):
        r = numpyro.sample("r", dist.Normal(0, s_row))
    with numpyro.plate("col2", y.shape[1], dim=-1), numpyro.plate("row2", y.shape[0], dim=-2):
        numpyro.sample("y", dist.Normal(mu + r + c, sigma), obs=y)


# 13. beta regression on a logit scale without a clip (the mean rounds to 0 or 1 in q's tails)
def beta_regression_unclipped(x, y):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    phi = numpyro.sample("phi", dist.Exponential(0.1))
    mu = jax.nn.sigmoid(a + b * x)
    with numpyro.plate("n", x.shape[0]):
        numpyro.sample("y", dist.Beta(mu * phi, (1 - mu) * phi), obs=y)


# 14. logistic growth curve by lax.scan with exp, Normal noise on the log scale
T14 = np.arange(25, dtype=np.float32)


def _growth(r, K, n0, T):
    def step(n, _):
        n = n + r * n * (1 - n / K)
        return n, n

    return jax.lax.scan(step, n0, None, length=T)[1]


Y14 = np.log(np.asarray(_growth(0.35, 50.0, 2.0, 25))) + rng.normal(0, 0.05, 25).astype(np.float32)


def logistic_growth(y):
    r = numpyro.sample("r", dist.LogNormal(-1.0, 1.0))
    K = numpyro.sample("K", dist.LogNormal(3.0, 1.0))
    n0 = numpyro.sample("n0", dist.LogNormal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    path = _growth(r, K, n0, y.shape[0])
    numpyro.sample("y", dist.Normal(jnp.log(jnp.clip(path, 1e-6)), sigma), obs=y)


# 15. BDA's rat tumours with its improper (a + b)^(-5/2) prior on a flat positive pair
K15 = np.array([0, 0, 0, 0, 1, 1, 2, 2, 1, 5, 2, 4, 3, 6, 4], np.float32)
N15 = np.array([20, 19, 17, 20, 20, 18, 25, 24, 19, 46, 27, 20, 20, 23, 20], np.float32)


def bda_rats(k, n):
    a = numpyro.sample("a", dist.ImproperUniform(constraints.positive, (), ()))
    b = numpyro.sample("b", dist.ImproperUniform(constraints.positive, (), ()))
    numpyro.factor("prior", -2.5 * jnp.log(a + b))
    with numpyro.plate("g", k.shape[0]):
        theta = numpyro.sample("theta", dist.Beta(a, b))
        numpyro.sample("k", dist.Binomial(n, theta), obs=k)


PROBES_LATER = {
    "poisson_large_x": (poisson_large_x, (X11, Y11)),
    "two_way_table": (two_way_table, (Y12,)),
    "beta_regression_unclipped": (beta_regression_unclipped, (X3 * 3, Y3)),
    "logistic_growth": (logistic_growth, (Y14.astype(np.float32),)),
    "bda_rats": (bda_rats, (K15, N15)),
}


# Eight more, written after the first fifteen had run (their own generator)
rng3 = np.random.default_rng(4848)

# GP regression, marginal likelihood, positive hyperparameters
X1 = np.sort(rng3.uniform(0, 10, 30)).astype(np.float32)
Y1 = (np.sin(X1) + rng3.normal(0, 0.3, 30)).astype(np.float32)


def gp_marginal(x, y):
    ls = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
    var = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    k = var * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / ls**2) + (noise**2 + 1e-5) * jnp.eye(x.shape[0])
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(x.shape[0]), covariance_matrix=k), obs=y)


# Michaelis-Menten
X2 = np.array([0.02, 0.02, 0.06, 0.06, 0.11, 0.11, 0.22, 0.22, 0.56, 0.56, 1.10, 1.10], np.float32)
Y2 = np.array([76, 47, 97, 107, 123, 139, 159, 152, 191, 201, 207, 200], np.float32)  # Puromycin (treated)


def michaelis_menten(conc, rate):
    vmax = numpyro.sample("vmax", dist.LogNormal(5.0, 1.0))
    km = numpyro.sample("km", dist.LogNormal(-2.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("n", conc.shape[0]):
        numpyro.sample("y", dist.Normal(vmax * conc / (km + conc), sigma), obs=rate)


# one-compartment oral pharmacokinetics (ka - ke in a denominator)
T3 = np.array([0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 24], np.float32)


def _conc(ka, ke, v, t):
    return 100.0 * ka / (v * (ka - ke)) * (jnp.exp(-ke * t) - jnp.exp(-ka * t))


C3 = (np.asarray(_conc(1.5, 0.15, 20.0, T3)) * np.exp(rng3.normal(0, 0.1, 10))).astype(np.float32)


def pk_oral(t, c):
    ka = numpyro.sample("ka", dist.LogNormal(0.0, 1.0))
    ke = numpyro.sample("ke", dist.LogNormal(-2.0, 1.0))
    v = numpyro.sample("v", dist.LogNormal(3.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    with numpyro.plate("n", t.shape[0]):
        numpyro.sample("c", dist.LogNormal(jnp.log(_conc(ka, ke, v, t)), sigma), obs=c)


# Lotka-Volterra by Euler steps in a scan, log-normal observations
def _lv(alpha, beta, gamma, delta, u0, n):
    def step(u, _):
        x, y = u
        dt = 0.1
        x2 = x + dt * (alpha * x - beta * x * y)
        y2 = y + dt * (delta * x * y - gamma * y)
        u2 = (jnp.clip(x2, 1e-6, 1e6), jnp.clip(y2, 1e-6, 1e6))
        return u2, jnp.stack(u2)

    return jax.lax.scan(step, u0, None, length=n)[1]


U4 = np.asarray(_lv(1.0, 0.1, 1.5, 0.075, (10.0, 5.0), 60))[::3]
Y4 = (U4 * np.exp(rng3.normal(0, 0.1, U4.shape))).astype(np.float32)


def lotka_volterra(y):
    alpha = numpyro.sample("alpha", dist.LogNormal(0.0, 0.5))
    beta = numpyro.sample("beta", dist.LogNormal(-2.0, 0.5))
    gamma = numpyro.sample("gamma", dist.LogNormal(0.0, 0.5))
    delta = numpyro.sample("delta", dist.LogNormal(-2.5, 0.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    path = _lv(alpha, beta, gamma, delta, (10.0, 5.0), 60)[::3]
    numpyro.sample("y", dist.LogNormal(jnp.log(path), sigma), obs=y)


# a matrix latent with to_event(2), low-rank factor model
W5 = rng3.normal(size=(6, 2))
Y5 = (rng3.normal(size=(80, 2)) @ W5.T + rng3.normal(0, 0.5, (80, 6))).astype(np.float32)


def factor_model(y):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([y.shape[1], 2]).to_event(2))
    psi = numpyro.sample("psi", dist.HalfNormal(1.0).expand([y.shape[1]]).to_event(1))
    cov = w @ w.T + jnp.diag(psi**2)
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(y.shape[1]), covariance_matrix=cov), obs=y)


# truncated Cauchy scale, negative-binomial (probs) counts
Y6 = rng3.negative_binomial(3, 0.3, size=100).astype(np.float32)


def negbin_probs(y):
    r = numpyro.sample("r", dist.TruncatedDistribution(dist.Cauchy(0.0, 5.0), low=0.0))
    p = numpyro.sample("p", dist.Beta(1.0, 1.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.NegativeBinomialProbs(r, probs=1 - p), obs=y)


# exponential survival, censoring by numpyro.handlers.mask + a survival factor
T7 = rng3.exponential(2.0, 80).astype(np.float32)
E7 = T7 < 3.0
T7 = np.minimum(T7, 3.0).astype(np.float32)
X7 = rng3.normal(size=80).astype(np.float32)


def exponential_survival(x, t, event):
    b0 = numpyro.sample("b0", dist.Normal(0, 2))
    b1 = numpyro.sample("b1", dist.Normal(0, 2))
    rate = jnp.exp(b0 + b1 * x)
    with numpyro.plate("n", t.shape[0]):
        with numpyro.handlers.mask(mask=event):
            numpyro.sample("t", dist.Exponential(rate), obs=t)
        numpyro.factor("censored", jnp.where(event, 0.0, -rate * t))


# a deterministic transform and a masked Normal
Y8 = rng3.normal(1.0, 2.0, 50).astype(np.float32)
M8 = rng3.uniform(size=50) > 0.2


def masked_deterministic(y, observed):
    log_sigma = numpyro.sample("log_sigma", dist.Normal(0, 2))
    sigma = numpyro.deterministic("sigma", jnp.exp(log_sigma))
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma).mask(observed), obs=y)


PROBES_THIRD = {
    "gp_marginal": (gp_marginal, (X1, Y1)),
    "michaelis_menten": (michaelis_menten, (X2, Y2)),
    "pk_oral": (pk_oral, (T3, C3)),
    "lotka_volterra": (lotka_volterra, (Y4,)),
    "factor_model": (factor_model, (Y5,)),
    "negbin_probs": (negbin_probs, (Y6,)),
    "exponential_survival": (exponential_survival, (X7, T7, E7)),
    "masked_deterministic": (masked_deterministic, (Y8, M8)),
}


_DESCRIPTIONS = {
    "gumbel_regression": "Gumbel regression, folded Student-t scale (simulated, 60)",
    "improper": "normal mean and scale under ImproperUniform priors (simulated, 40)",
    "beta_proportion": "BetaProportion regression (simulated, 80)",
    "dirichlet_multinomial": "DirichletMultinomial counts, Dirichlet mean, gamma concentration (30 x 5)",
    "multivariate_t": "MultivariateStudentT location and scales (simulated, 50 x 2)",
    "geometric_groups": "Geometric counts with Logistic group effects (simulated, 120)",
    "lkj_corr": "LKJ correlation matrix and scales of MultivariateNormal data (60 x 3)",
    "censored_weibull": "right-censored Weibull through jnp.where (simulated, 70)",
    "sparse_poisson": "Laplace-prior Poisson regression with exposure (simulated, 100 x 6)",
    "variance_components": "inverse-gamma variance components, two crossed factors (90)",
    "poisson_large_x": "Poisson regression, covariates up to 10, Normal(0, 10) priors (150 x 3)",
    "two_way_table": "row and column effects, plates at dims -2 and -1 (6 x 5)",
    "beta_regression_unclipped": "beta regression on a logit mean without a clip (80)",
    "logistic_growth": "discrete logistic growth curve by lax.scan (25 log sizes)",
    "bda_rats": "BDA's beta-binomial with the improper (a + b)^(-5/2) prior (15 groups)",
    "gp_marginal": "GP regression by its marginal likelihood, positive hyperparameters (30)",
    "michaelis_menten": "Michaelis-Menten curve of Puromycin (treated) rates (12)",
    "pk_oral": "one-compartment oral pharmacokinetics, ka - ke in a denominator (10)",
    "lotka_volterra": "Lotka-Volterra by Euler steps in lax.scan, log-normal counts (20 x 2)",
    "factor_model": "two-factor model, a to_event(2) loading matrix (80 x 6)",
    "negbin_probs": "NegativeBinomialProbs counts, truncated Cauchy shape (100)",
    "exponential_survival": "exponential survival, censoring by handlers.mask and a factor (80)",
    "masked_deterministic": "a masked Normal and a deterministic scale (50)",
}
CORNER_MODELS = {
    name: TextbookModel(name, model, tuple(args), _DESCRIPTIONS[name])
    for name, (model, args) in {**PROBES_FIRST, **PROBES_LATER, **PROBES_THIRD}.items()
}

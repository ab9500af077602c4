"""Six more NumPyro models, written in the forty-sixth session before anything was run on them:
the kinds a reviewer would write to test the defaults (data simulated with a fixed seed of this
module's own):

* ``car_poisson``: disease counts in 60 areas of a 6 x 10 grid with expected counts as an
  offset, a BYM-style log rate: an intrinsic CAR effect (the pairwise-difference density as a
  ``numpyro.factor``, softly centred) plus an unstructured one, ``HalfNormal`` scales.
* ``nested_normal``: a three-level normal hierarchy (600 students in 40 classrooms in 10
  schools), non-centred school and classroom effects, three ``HalfNormal`` scales.
* ``garch``: GARCH(1, 1) on 400 returns with Student-t innovations; ``(alpha, beta, 1 - alpha -
  beta)`` a Dirichlet (the stationarity constraint), ``omega ~ LogNormal``, ``nu ~ Gamma(2,
  0.1)`` (the Student-t's degrees of freedom less 2); the variance recursion in ``jax.lax.scan``.
* ``random_slopes``: a logistic regression with varying intercepts and slopes in 30 groups
  (1,500 rows), non-centred, ``HalfNormal`` scales.
* ``frailty``: exponential survival times of 200 subjects in 25 clusters with a gamma frailty
  of mean 1 per cluster (``Gamma(1 / k, 1 / k)``, ``k ~ HalfNormal(1)``) and 30% right
  censoring through the survival function as a ``numpyro.factor``.
* ``gp_classification``: a latent Gaussian process classifier on 40 points, squared-exponential
  kernel, ``f = L z`` non-centred, lengthscale ``InverseGamma(5, 5)``, amplitude
  ``HalfNormal(1)``.

Six more, written after the first six were measured and before these ran (a stream of their own):

* ``hmm``: a two-state Gaussian hidden Markov model of 200 observations, the states summed out
  by the forward algorithm in ``lax.scan`` (``logsumexp``), the transition rows ``Dirichlet``,
  the state means ``Normal`` and a shared ``HalfNormal`` noise.
* ``hier_negbin``: counts in 40 groups of 10, ``NegativeBinomial2`` with a group effect and a
  covariate, ``concentration ~ Gamma(2, 0.1)``, non-centred effects.
* ``dirichlet_hier``: category counts of 12 groups over 5 categories, ``theta_g ~
  Dirichlet(alpha m)``, ``m ~ Dirichlet(1)``, ``alpha ~ Gamma(2, 0.1)``.
* ``logistic_shrinkage``: logistic regression on 50 features (5 of them active), 200 rows,
  ``beta_j ~ Normal(0, tau)``, ``tau ~ HalfCauchy(1)``.
* ``measurement_error``: errors-in-variables regression, 100 true covariates as latents
  observed with noise 0.5, ``y ~ Normal(a + b x, sigma)``.
* ``spline``: a cubic B-spline of 20 coefficients on a second-order random walk (``tau ~
  HalfNormal(1)``), 150 noisy points of a smooth curve.

One written after the fix that ``car_poisson`` asked for, to check it on the form Stan's case
study recommends (not blind):

* ``bym2``: ``car_poisson``'s data under the BYM2 parametrization of Riebler et al. (2016):
  ``sigma (sqrt(rho / s) phi + sqrt(1 - rho) theta)`` with ``rho ~ Beta(0.5, 0.5)``, ``s`` the
  geometric mean of the ICAR's marginal variances.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["BLIND_MODELS"]

_RNG = np.random.default_rng(46)

# car_poisson: a 6 x 10 grid, rook adjacency
_ROWS, _COLS = 6, 10
_IDX = np.arange(_ROWS * _COLS).reshape(_ROWS, _COLS)
CAR_EDGES = np.array(
    [(_IDX[r, c], _IDX[r, c + 1]) for r in range(_ROWS) for c in range(_COLS - 1)]
    + [(_IDX[r, c], _IDX[r + 1, c]) for r in range(_ROWS - 1) for c in range(_COLS)],
    np.int32,
)
CAR_EXPECTED = _RNG.uniform(2.0, 20.0, size=_ROWS * _COLS).astype(np.float32)
_SPATIAL = np.cumsum(np.cumsum(0.15 * _RNG.normal(size=(_ROWS, _COLS)), axis=0), axis=1).ravel()
_SPATIAL = _SPATIAL - _SPATIAL.mean()
CAR_COUNTS = _RNG.poisson(CAR_EXPECTED * np.exp(0.1 + _SPATIAL + 0.1 * _RNG.normal(size=60))).astype(
    np.float32
)

# nested_normal: 10 schools x 4 classrooms x 15 students
_SCHOOL_OF_CLASS = np.repeat(np.arange(10), 4).astype(np.int32)
NESTED_CLASS = np.repeat(np.arange(40), 15).astype(np.int32)
NESTED_SCHOOL_OF_CLASS = _SCHOOL_OF_CLASS
NESTED_Y = (
    50.0
    + 4.0 * _RNG.normal(size=10)[_SCHOOL_OF_CLASS][NESTED_CLASS]
    + 2.0 * _RNG.normal(size=40)[NESTED_CLASS]
    + 8.0 * _RNG.normal(size=600)
).astype(np.float32)


def _garch_returns(n=400, omega=0.05, alpha=0.1, beta=0.85, nu=6.0):
    returns = np.empty(n)
    variance = omega / (1 - alpha - beta)
    previous = 0.0
    for t in range(n):
        variance = omega + alpha * previous**2 + beta * variance
        previous = np.sqrt(variance) * _RNG.standard_t(nu) * np.sqrt((nu - 2) / nu)
        returns[t] = previous
    return returns.astype(np.float32)


GARCH_RETURNS = _garch_returns()

# random_slopes: 30 groups x 50 rows
SLOPES_GROUP = np.repeat(np.arange(30), 50).astype(np.int32)
SLOPES_X = _RNG.normal(size=1500).astype(np.float32)
_A = -0.5 + 0.8 * _RNG.normal(size=30)
_B = 1.0 + 0.5 * _RNG.normal(size=30)
_SLOPES_LOGIT = _A[SLOPES_GROUP] + _B[SLOPES_GROUP] * SLOPES_X
SLOPES_Y = (_RNG.uniform(size=1500) < 1 / (1 + np.exp(-_SLOPES_LOGIT))).astype(np.float32)

# frailty: 25 clusters x 8 subjects, one covariate, exponential times, uniform censoring
FRAILTY_CLUSTER = np.repeat(np.arange(25), 8).astype(np.int32)
FRAILTY_X = _RNG.normal(size=200).astype(np.float32)
_FRAIL = _RNG.gamma(1 / 0.5, 0.5, size=25)
_TIMES = _RNG.exponential(1 / (0.2 * np.exp(0.7 * FRAILTY_X) * _FRAIL[FRAILTY_CLUSTER]))
_CENSOR = np.quantile(_TIMES, 0.7)
FRAILTY_TIME = np.minimum(_TIMES, _CENSOR).astype(np.float32)
FRAILTY_EVENT = (_TIMES <= _CENSOR).astype(np.float32)

# gp_classification: 40 points on [0, 10]
GPC_X = np.sort(_RNG.uniform(0, 10, size=40)).astype(np.float32)
GPC_Y = (_RNG.uniform(size=40) < 1 / (1 + np.exp(-2.5 * np.sin(GPC_X)))).astype(np.float32)


_RNG2 = np.random.default_rng(4646)

# hmm: two states, sticky transitions
_STATES = [0]
for _ in range(199):
    _STATES.append(_STATES[-1] if _RNG2.uniform() < 0.92 else 1 - _STATES[-1])
HMM_Y = (np.array([-1.0, 1.5])[np.array(_STATES)] + 0.7 * _RNG2.normal(size=200)).astype(np.float32)

# hier_negbin: 40 groups x 10
NEGBIN_GROUP = np.repeat(np.arange(40), 10).astype(np.int32)
NEGBIN_X = _RNG2.normal(size=400).astype(np.float32)
_NB_MU = np.exp(1.2 + 0.4 * NEGBIN_X + 0.5 * _RNG2.normal(size=40)[NEGBIN_GROUP])
NEGBIN_Y = _RNG2.negative_binomial(4.0, 4.0 / (4.0 + _NB_MU)).astype(np.float32)

# dirichlet_hier: 12 groups x 5 categories, 30-200 draws each
_M = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
DIRICHLET_COUNTS = np.stack(
    [_RNG2.multinomial(int(_RNG2.integers(30, 200)), _RNG2.dirichlet(20.0 * _M)) for _ in range(12)]
).astype(np.float32)

# logistic_shrinkage: 200 x 50, 5 active
SHRINK_X = _RNG2.normal(size=(200, 50)).astype(np.float32)
_SHRINK_BETA = np.zeros(50)
_SHRINK_BETA[:5] = [1.5, -1.0, 0.8, -0.6, 0.5]
SHRINK_Y = (_RNG2.uniform(size=200) < 1 / (1 + np.exp(-(SHRINK_X @ _SHRINK_BETA)))).astype(np.float32)

# measurement_error: 100 rows
_X_TRUE = _RNG2.normal(2.0, 1.0, size=100)
ME_X_OBS = (_X_TRUE + 0.5 * _RNG2.normal(size=100)).astype(np.float32)
ME_Y = (1.0 + 0.8 * _X_TRUE + 0.4 * _RNG2.normal(size=100)).astype(np.float32)

# spline: 150 points of a smooth curve, a cubic B-spline basis of 20 functions
SPLINE_X = np.sort(_RNG2.uniform(0.0, 1.0, size=150))
SPLINE_Y = (np.sin(2 * np.pi * SPLINE_X) + 0.5 * SPLINE_X + 0.3 * _RNG2.normal(size=150)).astype(np.float32)


def _bspline_basis(x, num=20, degree=3):
    inner = np.linspace(0.0, 1.0, num - degree + 1)
    knots = np.concatenate([np.zeros(degree), inner, np.ones(degree)])
    basis = ((knots[:-1, None] <= x[None, :]) & (x[None, :] < knots[1:, None])).astype(float)
    basis[np.searchsorted(knots, 1.0, side="left") - 1, x >= 1.0] = 1.0
    for d in range(1, degree + 1):
        left_den = knots[d:-1] - knots[: -d - 1]
        right_den = knots[d + 1 :] - knots[1:-d]
        left = np.where(
            left_den[:, None] > 0,
            (x[None, :] - knots[: -d - 1, None]) / np.where(left_den, left_den, 1)[:, None],
            0.0,
        )
        right = np.where(
            right_den[:, None] > 0,
            (knots[d + 1 :, None] - x[None, :]) / np.where(right_den, right_den, 1)[:, None],
            0.0,
        )
        basis = left * basis[:-1] + right * basis[1:]
    return basis.T.astype(np.float32)


SPLINE_BASIS = _bspline_basis(SPLINE_X)
SPLINE_X = SPLINE_X.astype(np.float32)


def _icar_scaling(edges, n):
    laplacian = np.zeros((n, n))
    for i, j in edges:
        laplacian[i, i] += 1.0
        laplacian[j, j] += 1.0
        laplacian[i, j] -= 1.0
        laplacian[j, i] -= 1.0
    return np.float32(np.exp(np.mean(np.log(np.diag(np.linalg.pinv(laplacian))))))


CAR_SCALING = _icar_scaling(CAR_EDGES, CAR_EXPECTED.shape[0])


def car_poisson(edges, expected, counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    n = expected.shape[0]
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 1.0))
    sigma_phi = numpyro.sample("sigma_phi", dist.HalfNormal(1.0))
    sigma_theta = numpyro.sample("sigma_theta", dist.HalfNormal(1.0))
    phi = numpyro.sample("phi", dist.Normal(0.0, 1.0).expand([n]).to_event(1).mask(False))
    # the intrinsic CAR density of the unit-scale effect, and a soft sum-to-zero constraint
    diff = phi[edges[:, 0]] - phi[edges[:, 1]]
    numpyro.factor("icar", -0.5 * jnp.sum(diff**2))
    numpyro.factor("centred", dist.Normal(0.0, 0.001 * n).log_prob(jnp.sum(phi)))
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([n]).to_event(1))
    log_rate = jnp.log(expected) + intercept + sigma_phi * phi + sigma_theta * theta
    with numpyro.plate("areas", n):
        numpyro.sample("y", dist.Poisson(jnp.exp(log_rate)), obs=counts)


def bym2(edges, expected, counts, scaling):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    n = expected.shape[0]
    beta0 = numpyro.sample("beta0", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    rho = numpyro.sample("rho", dist.Beta(0.5, 0.5))
    phi = numpyro.sample("phi", dist.Normal(0.0, 1.0).expand([n]).to_event(1).mask(False))
    diff = phi[edges[:, 0]] - phi[edges[:, 1]]
    numpyro.factor("icar", -0.5 * jnp.sum(diff**2))
    numpyro.factor("centred", dist.Normal(0.0, 0.001 * n).log_prob(jnp.sum(phi)))
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([n]).to_event(1))
    convolved = jnp.sqrt(rho / scaling) * phi + jnp.sqrt(1.0 - rho) * theta
    with numpyro.plate("areas", n):
        numpyro.sample("y", dist.Poisson(expected * jnp.exp(beta0 + sigma * convolved)), obs=counts)


def nested_normal(class_idx, school_of_class, y):
    import numpyro
    import numpyro.distributions as dist

    n_class = school_of_class.shape[0]
    n_school = 10
    mu = numpyro.sample("mu", dist.Normal(50.0, 20.0))
    tau_school = numpyro.sample("tau_school", dist.HalfNormal(10.0))
    tau_class = numpyro.sample("tau_class", dist.HalfNormal(10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("schools", n_school):
        z_school = numpyro.sample("z_school", dist.Normal(0.0, 1.0))
    with numpyro.plate("classes", n_class):
        z_class = numpyro.sample("z_class", dist.Normal(0.0, 1.0))
    class_mean = mu + tau_school * z_school[school_of_class] + tau_class * z_class
    with numpyro.plate("students", y.shape[0]):
        numpyro.sample("y", dist.Normal(class_mean[class_idx], sigma), obs=y)


def garch(returns):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    omega = numpyro.sample("omega", dist.LogNormal(-3.0, 1.0))
    weights = numpyro.sample("weights", dist.Dirichlet(jnp.array([2.0, 8.0, 2.0])))
    alpha, beta = weights[0], weights[1]
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))

    def step(carry, r):
        variance, previous = carry
        variance = omega + alpha * previous**2 + beta * variance
        return (variance, r), variance

    initial = omega / jnp.maximum(1.0 - alpha - beta, 1e-3)
    _, variances = jax.lax.scan(step, (initial, 0.0), returns)
    # innovations of unit variance: Student-t with nu + 2 degrees of freedom, scaled
    scale = jnp.sqrt(variances * nu / (nu + 2.0))
    with numpyro.plate("time", returns.shape[0]):
        numpyro.sample("r", dist.StudentT(nu + 2.0, 0.0, scale), obs=returns)


def random_slopes(group, x, y):
    import numpyro
    import numpyro.distributions as dist

    n_group = 30
    a0 = numpyro.sample("a0", dist.Normal(0.0, 2.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(1.0))
    sigma_b = numpyro.sample("sigma_b", dist.HalfNormal(1.0))
    with numpyro.plate("groups", n_group):
        za = numpyro.sample("za", dist.Normal(0.0, 1.0))
        zb = numpyro.sample("zb", dist.Normal(0.0, 1.0))
    a = a0 + sigma_a * za
    b = b0 + sigma_b * zb
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a[group] + b[group] * x), obs=y)


def frailty(cluster, x, time, event):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    log_base = numpyro.sample("log_base", dist.Normal(0.0, 2.0))
    coef = numpyro.sample("coef", dist.Normal(0.0, 1.0))
    k = numpyro.sample("k", dist.HalfNormal(1.0))
    with numpyro.plate("clusters", 25):
        w = numpyro.sample("w", dist.Gamma(1.0 / k, 1.0 / k))
    rate = jnp.exp(log_base + coef * x) * w[cluster]
    # events: the exponential density; censored: its survival function
    numpyro.factor("survival", jnp.sum(event * jnp.log(rate) - rate * time))


def gp_classification(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    lengthscale = numpyro.sample("lengthscale", dist.InverseGamma(5.0, 5.0))
    amplitude = numpyro.sample("amplitude", dist.HalfNormal(1.0))
    offset = numpyro.sample("offset", dist.Normal(0.0, 1.0))
    sq = (x[:, None] - x[None, :]) ** 2
    kernel = amplitude**2 * jnp.exp(-0.5 * sq / lengthscale**2) + 1e-4 * jnp.eye(x.shape[0])
    cholesky = jnp.linalg.cholesky(kernel)
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([x.shape[0]]).to_event(1))
    f = offset + cholesky @ z
    with numpyro.plate("points", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=f), obs=y)


def hmm(y):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    with numpyro.plate("states", 2):
        transition = numpyro.sample("transition", dist.Dirichlet(jnp.array([4.0, 1.0])))
        mu = numpyro.sample("mu", dist.Normal(jnp.array([-1.0, 1.0]), 2.0))
    # rows: from each state (the Dirichlet's mass on "stay" put first, then swapped for state 1)
    log_trans = jnp.log(jnp.stack([transition[0], transition[1][::-1]]))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))

    def forward(log_alpha, obs):
        log_alpha = logsumexp(log_alpha[:, None] + log_trans, axis=0) + dist.Normal(mu, sigma).log_prob(obs)
        return log_alpha, None

    initial = jnp.log(0.5) + dist.Normal(mu, sigma).log_prob(y[0])
    final, _ = jax.lax.scan(forward, initial, y[1:])
    numpyro.factor("marginal", logsumexp(final))


def hier_negbin(group, x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    concentration = numpyro.sample("concentration", dist.Gamma(2.0, 0.1))
    with numpyro.plate("groups", 40):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    mean = a + b * x + sigma * z[group]
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.NegativeBinomial2(mean=jnp.exp(mean), concentration=concentration), obs=y)


def dirichlet_hier(counts):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    k = counts.shape[1]
    m = numpyro.sample("m", dist.Dirichlet(jnp.ones(k)))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 0.1))
    with numpyro.plate("groups", counts.shape[0]):
        theta = numpyro.sample("theta", dist.Dirichlet(alpha * m))
        numpyro.sample("y", dist.Multinomial(total_count=counts.sum(-1), probs=theta), obs=counts)


def logistic_shrinkage(x, y):
    import numpyro
    import numpyro.distributions as dist

    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    with numpyro.plate("features", x.shape[1]):
        beta = numpyro.sample("beta", dist.Normal(0.0, tau))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=intercept + x @ beta), obs=y)


def measurement_error(x_obs, y):
    import numpyro
    import numpyro.distributions as dist

    mu_x = numpyro.sample("mu_x", dist.Normal(0.0, 5.0))
    sd_x = numpyro.sample("sd_x", dist.HalfNormal(2.0))
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("rows", y.shape[0]):
        x = numpyro.sample("x", dist.Normal(mu_x, sd_x))
        numpyro.sample("x_obs", dist.Normal(x, 0.5), obs=x_obs)
        numpyro.sample("y", dist.Normal(a + b * x, sigma), obs=y)


def spline(basis, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    num = basis.shape[1]
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    start = numpyro.sample("start", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    steps = numpyro.sample("steps", dist.Normal(0.0, 1.0).expand([num - 2]).to_event(1))
    # a second-order random walk: the second differences are tau * steps
    slope = start[1] - start[0] + jnp.cumsum(tau * steps)
    coef = jnp.concatenate([start, start[1] + jnp.cumsum(slope)])
    with numpyro.plate("points", y.shape[0]):
        numpyro.sample("y", dist.Normal(basis @ coef, sigma), obs=y)


BLIND_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "car_poisson",
            car_poisson,
            (CAR_EDGES, CAR_EXPECTED, CAR_COUNTS),
            "BYM-style Poisson disease map, 60 areas (simulated)",
        ),
        TextbookModel(
            "nested_normal",
            nested_normal,
            (NESTED_CLASS, NESTED_SCHOOL_OF_CLASS, NESTED_Y),
            "three-level normal hierarchy, 600 students (simulated)",
        ),
        TextbookModel("garch", garch, (GARCH_RETURNS,), "GARCH(1, 1), Student-t, 400 returns (simulated)"),
        TextbookModel(
            "random_slopes",
            random_slopes,
            (SLOPES_GROUP, SLOPES_X, SLOPES_Y),
            "logistic regression, varying intercepts and slopes, 30 groups (simulated)",
        ),
        TextbookModel(
            "frailty",
            frailty,
            (FRAILTY_CLUSTER, FRAILTY_X, FRAILTY_TIME, FRAILTY_EVENT),
            "exponential survival, gamma frailty, censored (simulated)",
        ),
        TextbookModel(
            "gp_classification",
            gp_classification,
            (GPC_X, GPC_Y),
            "latent GP classifier, 40 points (simulated)",
        ),
        TextbookModel(
            "hmm", hmm, (HMM_Y,), "two-state Gaussian HMM, forward algorithm, 200 points (simulated)"
        ),
        TextbookModel(
            "hier_negbin",
            hier_negbin,
            (NEGBIN_GROUP, NEGBIN_X, NEGBIN_Y),
            "negative binomial GLMM, 40 groups (simulated)",
        ),
        TextbookModel(
            "dirichlet_hier",
            dirichlet_hier,
            (DIRICHLET_COUNTS,),
            "hierarchical Dirichlet-multinomial (simulated)",
        ),
        TextbookModel(
            "logistic_shrinkage",
            logistic_shrinkage,
            (SHRINK_X, SHRINK_Y),
            "logistic regression, 50 features under one scale (simulated)",
        ),
        TextbookModel(
            "measurement_error",
            measurement_error,
            (ME_X_OBS, ME_Y),
            "errors-in-variables regression, 100 latent covariates (simulated)",
        ),
        TextbookModel(
            "spline", spline, (SPLINE_BASIS, SPLINE_Y), "B-spline on a second-order random walk (simulated)"
        ),
        TextbookModel(
            "bym2",
            bym2,
            (CAR_EDGES, CAR_EXPECTED, CAR_COUNTS, CAR_SCALING),
            "car_poisson's data, BYM2 (Riebler et al. 2016)",
        ),
    )
}

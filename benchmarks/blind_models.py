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
    )
}

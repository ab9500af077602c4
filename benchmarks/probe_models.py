"""Ten more NumPyro models, written in the thirty-fifth session to probe the defaults off
their home ground (none of them was run before it was written here; data simulated with a
fixed seed of this module's own):

* ``probit``: probit regression, 150 rows x 3 features, ``y ~ Bernoulli(Phi(b0 + x b))``.
* ``softmax``: multinomial logistic regression, 3 classes from 2 features, 150 rows,
  ``W ~ Normal(0, 2)``, ``y ~ Categorical(logits=x W + c)``.
* ``crossed_effects``: a Poisson GLMM with two crossed grouping factors (12 x 8 cells, 3
  counts a cell), non-centred, ``sigma_row, sigma_col ~ HalfNormal(1)``.
* ``lasso``: linear regression with Laplace priors on 10 coefficients (Park & Casella 2008's
  prior with a fixed scale), 60 rows, ``sigma ~ HalfCauchy(2)``.
* ``student_df``: a Student-t location and scale with unknown degrees of freedom,
  ``nu ~ Gamma(2, 0.1)`` (Juarez & Steel 2010), 100 points.
* ``local_level``: a Gaussian random walk observed in noise, 80 steps,
  ``level ~ GaussianRandomWalk(sigma_level)``.
* ``lognormal_regression``: ``y ~ LogNormal(a + b x, sigma)``, 100 rows.
* ``zinb``: zero-inflated negative binomial counts, ``ZeroInflatedNegativeBinomial2``, 200 rows.

Two more, written after the coupled locations (:mod:`grepvi.optim.coupling`) were built, to see
whether they carry to ridges they were not built on (their data from a stream of their own):

* ``collinear``: linear regression on two nearly collinear features (correlation 0.998).
* ``polynomial``: a cubic in an uncentred ``x`` on ``[0, 3]`` (its powers correlated 0.9-0.99),
  ``sigma ~ HalfNormal(1)``.
"""

import numpy as np
from textbook_models import TextbookModel

_RNG = np.random.default_rng(35)

PROBIT_X = _RNG.normal(size=(150, 3)).astype(np.float32)
PROBIT_Y = (
    _RNG.uniform(size=150)
    < 0.5 * (1 + np.vectorize(__import__("math").erf)((0.3 + PROBIT_X @ [1.0, -0.7, 0.4]) / 2**0.5))
).astype(np.float32)

SOFTMAX_X = _RNG.normal(size=(150, 2)).astype(np.float32)
_LOGITS = SOFTMAX_X @ np.array([[1.5, -1.0, 0.0], [0.0, 1.2, -0.8]]) + np.array([0.3, 0.0, -0.2])
SOFTMAX_Y = np.array([_RNG.choice(3, p=np.exp(row) / np.exp(row).sum()) for row in _LOGITS], np.int32)

_ROWS = np.repeat(np.arange(12), 8 * 3)
_COLS = np.tile(np.repeat(np.arange(8), 3), 12)
CROSSED_ROW = _ROWS.astype(np.int32)
CROSSED_COL = _COLS.astype(np.int32)
CROSSED_Y = _RNG.poisson(
    np.exp(1.0 + 0.5 * _RNG.normal(size=12)[_ROWS] + 0.3 * _RNG.normal(size=8)[_COLS])
).astype(np.float32)

LASSO_X = _RNG.normal(size=(60, 10)).astype(np.float32)
LASSO_Y = (LASSO_X @ np.array([2.0, -1.5, 0, 0, 1.0, 0, 0, 0, 0, 0.5]) + _RNG.normal(size=60)).astype(
    np.float32
)

STUDENT_Y = (3.0 + 2.0 * _RNG.standard_t(4.0, size=100)).astype(np.float32)

_LEVEL = np.cumsum(0.3 * _RNG.normal(size=80))
LEVEL_Y = (_LEVEL + 0.5 * _RNG.normal(size=80)).astype(np.float32)

LOGNORMAL_X = _RNG.uniform(0, 3, size=100).astype(np.float32)
LOGNORMAL_Y = np.exp(0.5 + 0.4 * LOGNORMAL_X + 0.3 * _RNG.normal(size=100)).astype(np.float32)

ZINB_X = _RNG.normal(size=200).astype(np.float32)
_MU = np.exp(1.0 + 0.6 * ZINB_X)
ZINB_Y = np.where(_RNG.uniform(size=200) < 0.25, 0, _RNG.negative_binomial(3.0, 3.0 / (3.0 + _MU))).astype(
    np.float32
)


def probit(x, y):
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import ndtr

    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Bernoulli(probs=ndtr(b0 + x @ b)), obs=y)


def softmax(x, y):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0.0, 2.0).expand([x.shape[1], 3]).to_event(2))
    c = numpyro.sample("c", dist.Normal(0.0, 2.0).expand([3]).to_event(1))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Categorical(logits=x @ w + c), obs=y)


def crossed_effects(row, col, y):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    sigma_row = numpyro.sample("sigma_row", dist.HalfNormal(1.0))
    sigma_col = numpyro.sample("sigma_col", dist.HalfNormal(1.0))
    with numpyro.plate("rows", 12):
        u = numpyro.sample("u", dist.Normal(0.0, 1.0))
    with numpyro.plate("cols", 8):
        v = numpyro.sample("v", dist.Normal(0.0, 1.0))
    import jax.numpy as jnp

    rate = jnp.exp(mu + sigma_row * u[row] + sigma_col * v[col])
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Poisson(rate), obs=y)


def lasso(x, y):
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Laplace(0.0, 0.5).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(b0 + x @ b, sigma), obs=y)


def student_df(y):
    import numpyro
    import numpyro.distributions as dist

    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    scale = numpyro.sample("scale", dist.HalfNormal(5.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, loc, scale), obs=y)


def local_level(y):
    import numpyro
    import numpyro.distributions as dist

    sigma_level = numpyro.sample("sigma_level", dist.HalfNormal(1.0))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))
    level = numpyro.sample("level", dist.GaussianRandomWalk(sigma_level, num_steps=y.shape[0]))
    numpyro.sample("y", dist.Normal(level, sigma_obs).to_event(1), obs=y)


def lognormal_regression(x, y):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.LogNormal(a + b * x, sigma), obs=y)


def zinb(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 3.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 3.0))
    phi = numpyro.sample("phi", dist.Gamma(2.0, 0.5))
    gate = numpyro.sample("gate", dist.Beta(1.0, 1.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.ZeroInflatedNegativeBinomial2(jnp.exp(b0 + b1 * x), phi, gate=gate), obs=y)


_LATER_RNG = np.random.default_rng(351)
COLLINEAR_X1 = _LATER_RNG.normal(size=80)
COLLINEAR_X = np.stack([COLLINEAR_X1, COLLINEAR_X1 + 0.06 * _LATER_RNG.normal(size=80)], 1).astype(np.float32)
COLLINEAR_Y = (1.0 + 1.5 * COLLINEAR_X1 + 0.5 * _LATER_RNG.normal(size=80)).astype(np.float32)
POLY_X = _LATER_RNG.uniform(0.0, 3.0, size=60).astype(np.float32)
POLY_Y = (1.0 - 2.0 * POLY_X + 0.8 * POLY_X**2 + 0.3 * _LATER_RNG.normal(size=60)).astype(np.float32)


def collinear(x, y):
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(b0 + x @ b, sigma), obs=y)


def polynomial(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    coef = numpyro.sample("coef", dist.Normal(0.0, 5.0).expand([4]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    powers = jnp.stack([jnp.ones_like(x), x, x**2, x**3], 1)
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(powers @ coef, sigma), obs=y)


PROBE_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel("probit", probit, (PROBIT_X, PROBIT_Y), "probit regression, 150 rows (simulated)"),
        TextbookModel("softmax", softmax, (SOFTMAX_X, SOFTMAX_Y), "3-class softmax regression (simulated)"),
        TextbookModel(
            "crossed_effects",
            crossed_effects,
            (CROSSED_ROW, CROSSED_COL, CROSSED_Y),
            "Poisson GLMM, crossed 12 x 8 effects (simulated)",
        ),
        TextbookModel(
            "lasso", lasso, (LASSO_X, LASSO_Y), "Laplace-prior regression, 10 features (simulated)"
        ),
        TextbookModel("student_df", student_df, (STUDENT_Y,), "Student-t with unknown df (simulated)"),
        TextbookModel(
            "local_level", local_level, (LEVEL_Y,), "Gaussian random walk in noise, 80 steps (simulated)"
        ),
        TextbookModel(
            "lognormal_regression",
            lognormal_regression,
            (LOGNORMAL_X, LOGNORMAL_Y),
            "log-normal regression (simulated)",
        ),
        TextbookModel(
            "zinb", zinb, (ZINB_X, ZINB_Y), "zero-inflated negative binomial, 200 rows (simulated)"
        ),
        TextbookModel(
            "collinear",
            collinear,
            (COLLINEAR_X, COLLINEAR_Y),
            "regression, two collinear features (simulated)",
        ),
        TextbookModel(
            "polynomial", polynomial, (POLY_X, POLY_Y), "cubic regression, uncentred x (simulated)"
        ),
    )
}

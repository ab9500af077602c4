"""Ten more NumPyro models, written in the twenty-fourth session as a user would write them,
before any change was measured on them (the defaults' test on models the project never tuned on).

Each entry of :data:`FRESH_MODELS` is a :class:`textbook_models.TextbookModel` on data simulated
with a fixed seed:

* ``gamma_regression``: a gamma GLM with a log link, 300 x 3, ``shape ~ Gamma(2, 0.5)``,
  ``y ~ Gamma(shape, shape / exp(b0 + x b))``.
* ``beta_regression``: proportions, 200 x 2, mean-precision form (Ferrari & Cribari-Neto 2004),
  ``phi ~ Exponential(0.1)``, ``y ~ Beta(mu phi, (1 - mu) phi)``, ``mu = sigmoid(b0 + x b)``.
* ``irt_2pl``: a two-parameter item-response model, 100 students x 20 items, abilities
  ``Normal(0, 1)``, difficulties ``Normal(0, 2)``, discriminations ``LogNormal(0, 0.5)``.
* ``radon_centered``: varying intercepts written *centred* (Gelman & Hill 2007, ch. 12: 85
  counties, 900 houses), ``a_j ~ Normal(mu_a, sigma_a)``, ``sigma_a, sigma_y ~ HalfNormal(1)``.
* ``poisson_lognormal``: counts with one log-normal random effect per observation (200), the
  overdispersed Poisson of Breslow (1984)'s kind, non-centred.
* ``robust_regression``: Student-t errors with an unknown ``nu ~ Gamma(2, 0.1)`` (Juarez &
  Steel 2010's prior), 250 x 4.
* ``ar1``: an AR(1) series of 200 points, ``phi ~ Uniform(-1, 1)`` (an interval support),
  ``sigma ~ HalfCauchy(2)``.
* ``eight_schools_centered``: Rubin's eight schools written centred, ``theta_j ~ Normal(mu,
  tau)``: the funnel every tutorial warns of (the same model as the NumPyro zoo's, which the
  adapter's tests fit; new to this benchmark).
* ``mixture``: a two-component normal mixture with the assignments marginalized
  (``MixtureSameFamily``), 300 points, ``w ~ Dirichlet(1, 1)``.
* ``sum_ridge``: ``y ~ Normal(a + b, s)``, only the sum identified: a ridge (the mean-field
  optimum is the ridge's narrowest point, not its length).
"""

import numpy as np
from textbook_models import SCHOOL_EFFECTS, SCHOOL_SES, TextbookModel

__all__ = ["FRESH_MODELS"]


def gamma_regression(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    with numpyro.plate("feature", x.shape[1]):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    shape = numpyro.sample("shape", dist.Gamma(2.0, 0.5))
    mu = jnp.exp(b0 + x @ b)
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.Gamma(shape, shape / mu), obs=y)


def simulated_gamma_rows(num_rows=300, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, 3)).astype(np.float32)
    mu = np.exp(1.0 + x @ np.array([0.4, -0.2, 0.1]))
    return x, rng.gamma(3.0, mu / 3.0).astype(np.float32)


def beta_regression(x, y):
    import jax
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 2.0))
    with numpyro.plate("feature", x.shape[1]):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    phi = numpyro.sample("phi", dist.Exponential(0.1))
    mu = jax.nn.sigmoid(b0 + x @ b)
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.Beta(mu * phi, (1 - mu) * phi), obs=y)


def simulated_proportions(num_rows=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, 2)).astype(np.float32)
    mu = 1 / (1 + np.exp(-(-0.5 + x @ np.array([0.7, -0.4]))))
    return x, np.clip(rng.beta(mu * 20, (1 - mu) * 20), 1e-4, 1 - 1e-4).astype(np.float32)


def irt_2pl(student, item, y, num_students, num_items):
    import numpyro
    import numpyro.distributions as dist

    with numpyro.plate("students", num_students):
        ability = numpyro.sample("ability", dist.Normal(0.0, 1.0))
    with numpyro.plate("items", num_items):
        difficulty = numpyro.sample("difficulty", dist.Normal(0.0, 2.0))
        discrimination = numpyro.sample("discrimination", dist.LogNormal(0.0, 0.5))
    logits = discrimination[item] * (ability[student] - difficulty[item])
    with numpyro.plate("responses", y.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)


def simulated_responses(num_students=100, num_items=20, seed=0):
    rng = np.random.default_rng(seed)
    ability = rng.normal(size=num_students)
    difficulty = rng.normal(0, 1.0, num_items)
    discrimination = np.exp(rng.normal(0, 0.3, num_items))
    student, item = np.meshgrid(np.arange(num_students), np.arange(num_items), indexing="ij")
    student, item = student.ravel().astype(np.int32), item.ravel().astype(np.int32)
    p = 1 / (1 + np.exp(-discrimination[item] * (ability[student] - difficulty[item])))
    return student, item, (rng.random(student.size) < p).astype(np.float32)


def radon_centered(county, x, y, num_counties):
    import numpyro
    import numpyro.distributions as dist

    mu_a = numpyro.sample("mu_a", dist.Normal(0.0, 10.0))
    sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(1.0))
    with numpyro.plate("county", num_counties):
        a = numpyro.sample("a", dist.Normal(mu_a, sigma_a))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    sigma_y = numpyro.sample("sigma_y", dist.HalfNormal(1.0))
    with numpyro.plate("house", y.shape[0]):
        numpyro.sample("y", dist.Normal(a[county] + b * x, sigma_y), obs=y)


def simulated_houses(num_counties=85, num_houses=900, seed=0):
    rng = np.random.default_rng(seed)
    county = rng.integers(0, num_counties, num_houses).astype(np.int32)
    a = rng.normal(1.5, 0.3, num_counties)
    floor = (rng.random(num_houses) < 0.2).astype(np.float32)
    return county, floor, (a[county] - 0.6 * floor + rng.normal(0, 0.75, num_houses)).astype(np.float32)


def poisson_lognormal(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("obs", y.shape[0]):
        eps = numpyro.sample("eps", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Poisson(jnp.exp(b0 + b * x + sigma * eps)), obs=y)


def simulated_overdispersed(num_rows=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=num_rows).astype(np.float32)
    return x, rng.poisson(np.exp(1.0 + 0.5 * x + 0.6 * rng.normal(size=num_rows))).astype(np.float32)


def robust_regression(x, y):
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 10.0))
    with numpyro.plate("feature", x.shape[1]):
        b = numpyro.sample("b", dist.Normal(0.0, 2.5))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, b0 + x @ b, sigma), obs=y)


def simulated_heavy_tailed(num_rows=250, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_rows, 4)).astype(np.float32)
    y = 0.5 + x @ np.array([1.0, -0.5, 0.0, 0.3]) + 0.8 * rng.standard_t(3, num_rows)
    return x, y.astype(np.float32)


def ar1(y):
    import numpyro
    import numpyro.distributions as dist

    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    c = numpyro.sample("c", dist.Normal(0.0, 5.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.0))
    with numpyro.plate("t", y.shape[0] - 1):
        numpyro.sample("y", dist.Normal(c + phi * y[:-1], sigma), obs=y[1:])


def simulated_series(num_points=200, seed=0):
    rng = np.random.default_rng(seed)
    y = np.zeros(num_points)
    for t in range(1, num_points):
        y[t] = 0.3 + 0.7 * y[t - 1] + 0.5 * rng.normal()
    return (y.astype(np.float32),)


def eight_schools_centered(effects, standard_errors):
    """The zoo's centred eight schools (:func:`grepvi.interop.numpyro_zoo.eight_schools_model`,
    the adapter's test model; written the same way here first, one definition kept)."""
    from grepvi.interop.numpyro_zoo import eight_schools_model

    return eight_schools_model(effects, standard_errors)


def mixture(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(2)))
    with numpyro.plate("component", 2):
        loc = numpyro.sample("loc", dist.Normal(jnp.array([-1.0, 1.0]), 3.0))
        scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(dist.Categorical(w), dist.Normal(loc, scale)), obs=y)


def simulated_mixture(num_points=300, seed=0):
    rng = np.random.default_rng(seed)
    first = rng.random(num_points) < 0.3
    points = np.where(first, rng.normal(-2, 0.7, num_points), rng.normal(1.5, 1.0, num_points))
    return (points.astype(np.float32),)


def sum_ridge(y):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(a + b, s), obs=y)


def _irt_100_by_20(student, item, y):
    return irt_2pl(student, item, y, 100, 20)


def _radon_85_counties(county, x, y):
    return radon_centered(county, x, y, 85)


FRESH_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel("gamma_regression", gamma_regression, simulated_gamma_rows(), "gamma GLM, 300 x 3"),
        TextbookModel("beta_regression", beta_regression, simulated_proportions(), "beta regression, 200x2"),
        TextbookModel("irt_2pl", _irt_100_by_20, simulated_responses(), "2PL item response, 100 x 20"),
        TextbookModel(
            "radon_centered", _radon_85_counties, simulated_houses(), "varying intercepts, centred, 85 x 900"
        ),
        TextbookModel(
            "poisson_lognormal", poisson_lognormal, simulated_overdispersed(), "Poisson-log-normal, 200 rows"
        ),
        TextbookModel(
            "robust_regression", robust_regression, simulated_heavy_tailed(), "Student-t regression, 250 x 4"
        ),
        TextbookModel("ar1", ar1, simulated_series(), "AR(1), 200 points, phi ~ Uniform(-1, 1)"),
        TextbookModel(
            "eight_schools_centered",
            eight_schools_centered,
            (SCHOOL_EFFECTS, SCHOOL_SES),
            "eight schools, centred",
        ),
        TextbookModel("mixture", mixture, simulated_mixture(), "two-component normal mixture, 300 points"),
        TextbookModel(
            "sum_ridge",
            sum_ridge,
            (np.random.default_rng(1).normal(3.0, 1.0, 50).astype(np.float32),),
            "y ~ Normal(a + b, s), 50 points: a ridge",
        ),
    )
}

"""Every continuous support of NumPyro's constraint registry gets a family; overrides are
checked against the site's support; GrepGuide under NumPyro's own ELBOs and Predictive.

The families over transforms (``grepvi.families.transformed``) are tested as the built-in
families are (``tests/test_estimators_unbiased.py``): the mean of many G-REP gradient draws
against ``jax.grad`` of the closed-form ELBO, within 5 Monte Carlo standard errors, float64.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
dist = pytest.importorskip("numpyro.distributions")

import grepvi  # noqa: E402
from grepvi import numerics, testing  # noqa: E402
from grepvi.errors import ModelError  # noqa: E402
from grepvi.families.location_scale import HALF_LOG_2PI  # noqa: E402
from grepvi.families.logitnormal import gauss_hermite_expectation  # noqa: E402
from grepvi.families.transformed import Affine, TransformedNormal  # noqa: E402
from grepvi.interop.numpyro_model import FAMILY_NAMES, family_for_support, from_numpyro  # noqa: E402
from grepvi.target import inputs_at_means  # noqa: E402

constraints = dist.constraints
transforms = pytest.importorskip("numpyro.distributions.transforms")

NUM_DRAWS = 40_000
TOLERANCE = 5.0
SHAPES = (0.1, 1.0, 10.0)


def _check(model, params, num_draws=NUM_DRAWS, seed=0):
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), params)
        estimator = grepvi.get_estimator("grep")
        check = testing.check_unbiased(estimator, model, params, jax.random.key(seed), num_draws)
    assert np.all(np.isfinite(check.mean))
    assert check.max_abs_z() < TOLERANCE, (model.name, np.round(check.z_scores, 2), check.mean, check.exact)
    return check


# --- Affine: c + Gamma, c - Gamma, a + (b - a) Beta ---------------------------------------------


def _affine_of(model, loc, scale):
    """``model`` with its latent ``w`` replaced by ``z = loc + scale * w``: the same log joint
    in ``w = (z - loc) / scale``, so the exact ELBO is the base model's plus ``sum log|scale|``."""
    ((name, family),) = model.families.items()
    affine = Affine(base=family, loc=loc, scale=scale)
    to_base = lambda z: {name: (z[name] - loc) / scale}
    shift = float(np.sum(np.broadcast_to(np.log(np.abs(scale)), family.shape)))
    return model._replace(
        name=f"affine {model.name}",
        logdensity_fn=lambda z: model.logdensity_fn(to_base(z)),
        local_logdensity_fn=lambda z: model.local_logdensity_fn(to_base(z)),
        families={name: affine},
        exact_elbo=lambda params: model.exact_elbo(params) + shift,
    )


@pytest.mark.parametrize(
    "base, loc, scale",
    [
        ("gamma", 1.5, 1.0),  # greater_than(1.5): a Pareto or a TruncatedNormal(low=1.5)
        ("gamma", 2.0, -1.0),  # less_than(2)
        ("beta", -1.0, 3.0),  # interval(-1, 2)
        ("beta", 0.0, 10.0),  # Uniform(0, 10)
    ],
)
def test_affine_families_have_unbiased_g_rep_gradients(base, loc, scale):
    unconstrained = numerics.inverse_softplus
    shapes = jnp.asarray(SHAPES)
    if base == "gamma":
        model = testing.gamma_poisson(shape=(3,))
        params = {"concentration": unconstrained(shapes), "mean": unconstrained(jnp.full(3, 2.0))}
    else:
        model = testing.beta_bernoulli(shape=(3,))
        params = {"concentration1": unconstrained(shapes), "concentration0": unconstrained(jnp.full(3, 2.0))}
    ((name, _),) = model.families.items()
    _check(_affine_of(model, loc, scale), {name: params})


def test_affine_family_contract():
    family = Affine(base=grepvi.Gamma(shape=(3,)), loc=1.0, scale=2.0)
    params = family.init_params()
    eps = family.sample_standardized(params, jax.random.key(0), (5,))
    z = family.transform(params, eps)
    assert np.all(np.asarray(z) > 1.0)
    np.testing.assert_allclose(family.standardize(params, z), eps, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        family.log_prob_standardized(params, eps),
        family.log_prob(params, z) + family.log_abs_det_jacobian(params, eps),
        rtol=1e-4,
        atol=1e-4,
    )
    assert family.has_fisher and family.bounds()[0].item() == 1.0
    np.testing.assert_allclose(family.mean(params), 3.0)  # 1 + 2 * E[Gamma(1, 1)]


# --- TransformedNormal ------------------------------------------------------------------------


def _normal_entropy(p):
    return jnp.sum(0.5 + jnp.log(numerics.softplus(p["scale"])) + HALF_LOG_2PI)


def _lognormal_moments(m, s):
    mean = jnp.exp(m + 0.5 * s**2)
    return mean, jnp.expm1(s**2) * jnp.exp(2 * m + s**2)


def _ordered_case():
    """``y = ordered(u)`` (``y_0 = u_0``, ``y_i = y_{i-1} + exp(u_i)``), ``log p(y) = -sum
    (y_i - c_i)^2 / 2``: ``E[y_i]`` and ``Var[y_i]`` are sums of log-normal moments; the entropy
    is ``H[N] + sum_{i>0} mu_i`` (``log J = sum_{i>0} u_i``)."""
    c = jnp.asarray([-1.0, 0.5, 2.0])
    family = TransformedNormal(shape=(3,), constraint=constraints.ordered_vector)

    def logdensity_fn(z):
        return -0.5 * jnp.sum((z["y"] - c) ** 2)

    def exact_elbo(params):
        p = params["y"]
        m, s = p["loc"], numerics.softplus(p["scale"])
        mean_e, var_e = _lognormal_moments(m[1:], s[1:])
        mean = m[0] + jnp.concatenate([jnp.zeros(1, m.dtype), jnp.cumsum(mean_e)])
        var = s[0] ** 2 + jnp.concatenate([jnp.zeros(1, m.dtype), jnp.cumsum(var_e)])
        return -0.5 * jnp.sum(var + (mean - c) ** 2) + _normal_entropy(p) + jnp.sum(m[1:])

    params = {"y": {"loc": jnp.asarray([0.3, -0.5, 0.2]), "scale": jnp.asarray([-0.5, 0.0, 0.5])}}
    return family, logdensity_fn, exact_elbo, params


def _lower_cholesky_case():
    """2 x 2 lower Cholesky factor: NumPyro's unconstrained vector is ``(off-diagonal,
    log diagonal)``; ``log p(L) = -||L - C||^2 / 2``; ``log J = sum log diagonal``."""
    target = jnp.asarray([[1.5, 0.0], [-0.5, 0.7]])
    family = TransformedNormal(shape=(2, 2), constraint=constraints.lower_cholesky)

    def logdensity_fn(z):
        return -0.5 * jnp.sum((z["y"] - target) ** 2)

    def exact_elbo(params):
        p = params["y"]
        m, s = p["loc"], numerics.softplus(p["scale"])
        off = -0.5 * (s[0] ** 2 + (m[0] - target[1, 0]) ** 2)
        mean_d, var_d = _lognormal_moments(m[1:], s[1:])
        diag = -0.5 * jnp.sum(var_d + (mean_d - jnp.asarray([target[0, 0], target[1, 1]])) ** 2)
        return off + diag + _normal_entropy(p) + jnp.sum(m[1:])

    params = {"y": {"loc": jnp.asarray([0.2, 0.1, -0.3]), "scale": jnp.asarray([-1.0, 0.0, -0.5])}}
    return family, logdensity_fn, exact_elbo, params


def _corr_cholesky_case():
    """2 x 2 correlation Cholesky factor, ``L = [[1, 0], [t, sqrt(1 - t^2)]]``, ``t = tanh u``,
    under an LKJ(2) prior plus a pull towards ``t = 0.6``: a function of ``u`` alone, so the
    exact ELBO is a one-dimensional Gauss-Hermite expectation."""
    family = TransformedNormal(shape=(2, 2), constraint=constraints.corr_cholesky)
    lkj = dist.LKJCholesky(2, 2.0)

    def f(L):
        return lkj.log_prob(L) - 4.0 * (L[..., 1, 0] - 0.6) ** 2

    def logdensity_fn(z):
        return jnp.sum(f(z["y"]))

    def of_u(u):
        t = jnp.tanh(u)
        L = jnp.stack(
            [jnp.stack([jnp.ones_like(t), jnp.zeros_like(t)], -1), jnp.stack([t, jnp.sqrt(1 - t**2)], -1)], -2
        )
        log_j = jnp.log1p(-(t**2))  # d tanh / du
        return f(L) + log_j

    def exact_elbo(params):
        p = params["y"]
        m, s = p["loc"], numerics.softplus(p["scale"])
        return jnp.sum(gauss_hermite_expectation(of_u, m, s)) + _normal_entropy(p)

    params = {"y": {"loc": jnp.asarray([0.4]), "scale": jnp.asarray([-0.5])}}
    return family, logdensity_fn, exact_elbo, params


CASES = {
    "ordered_vector": _ordered_case,
    "lower_cholesky": _lower_cholesky_case,
    "corr_cholesky": _corr_cholesky_case,
}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c == "corr_cholesky" else c for c in sorted(CASES)]
)  # corr_cholesky: 27 s on CI (lower_cholesky and ordered_vector stay)
def test_transformed_normal_has_unbiased_g_rep_gradients(case):
    family, logdensity_fn, exact_elbo, params = CASES[case]()
    model = testing.ConjugateModel(case, logdensity_fn, None, {"y": family}, exact_elbo, {}, {}, {})
    _check(model, params)
    with jax.enable_x64(True):  # the family's quadrature entropy against a Monte Carlo one
        p = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), params)["y"]

        @jax.jit  # one program (eagerly, each primitive compiles on its own)
        def entropies(p, key):
            eps = family.sample_standardized(p, key, (200_000,))
            return family.entropy(p), -jnp.mean(family.log_prob(p, family.transform(p, eps)))

        entropy, entropy_mc = entropies(p, jax.random.key(2))
        assert float(entropy) == pytest.approx(float(entropy_mc), abs=0.02)


@pytest.mark.parametrize(
    "constraint, shape",
    [
        (constraints.ordered_vector, (4,)),
        (constraints.positive_ordered_vector, (2, 3)),
        pytest.param(constraints.lower_cholesky, (3, 3), marks=pytest.mark.slow),  # 12 s on CI
        pytest.param(constraints.corr_cholesky, (3, 3), marks=pytest.mark.slow),  # 20 s
        pytest.param(constraints.simplex, (4,), marks=pytest.mark.slow),  # 10 s
        pytest.param(constraints.positive_definite, (2, 2), marks=pytest.mark.slow),  # 9 s
        (constraints.softplus_positive, (3,)),
        (constraints.circular, (2,)),
        (constraints.real_vector, (3,)),
    ],
)
def test_transformed_normal_entropy_and_support(constraint, shape):
    """The quadrature entropy (every coordinate at the same Gauss-Hermite node) equals a Monte
    Carlo entropy within 5 standard errors; draws lie in the support; ``standardize`` inverts
    ``transform``."""
    family = TransformedNormal(shape=shape, constraint=constraint)
    params = family.init_params()
    params = {"loc": params["loc"] + 0.3, "scale": params["scale"] + 1.0}

    @jax.jit  # one program (eagerly, each primitive compiles on its own)
    def draws(params, key):
        eps = family.sample_standardized(params, key, (20_000,))
        z = family.transform(params, eps)
        log_q = family.log_prob(params, z)
        return (
            eps,
            z,
            jnp.all(constraint(z)),
            log_q,
            family.entropy(params),
            family.standardize(params, z[:10]),
        )

    eps, z, in_support, log_q, entropy, standardized = draws(params, jax.random.key(0))
    assert bool(in_support)
    assert log_q.shape == (20_000,) + family.batch_shape
    minus_log_q = -np.asarray(log_q, np.float64)
    error = minus_log_q.std(0) / math.sqrt(minus_log_q.shape[0])
    assert np.all(np.abs(np.asarray(entropy) - minus_log_q.mean(0)) < 5 * error + 1e-3)
    np.testing.assert_allclose(standardized, eps[:10], rtol=1e-3, atol=1e-3)


def test_square_transforms_log_jacobian_is_the_determinant():
    """NumPyro's ``log_abs_det_jacobian`` (the entropy's term) against ``slogdet`` of the
    Jacobian by autodiff, for the dimension-preserving transforms."""
    for constraint, size in [
        (constraints.ordered_vector, 4),
        (constraints.positive_ordered_vector, 4),
        (constraints.lower_cholesky, 3),
    ]:
        bijector = transforms.biject_to(constraint)
        u = jax.random.normal(jax.random.key(1), (size,))

        def flat(x, bijector=bijector):
            y = bijector(x)
            if y.ndim == 2:  # the lower triangle
                rows, cols = np.tril_indices(y.shape[0])
                return y[rows, cols]
            return y

        # compiled (eagerly, each primitive of the Jacobian compiles on its own: 106 programs)
        _, expected = jax.jit(lambda u, flat=flat: jnp.linalg.slogdet(jax.jacfwd(flat)(u)))(u)
        value = jax.jit(lambda u, bijector=bijector: bijector.log_abs_det_jacobian(u, bijector(u)))(u)
        assert float(value) == pytest.approx(float(expected), abs=1e-4)


def test_a_transform_whose_log_jacobian_is_not_a_sum_is_refused():
    class Coupled(transforms.Transform):  # y = x + (x_0^2) e_1: log J has a cross term? no: use exp(x0 * x1)
        domain = constraints.real_vector
        codomain = constraints.real_vector

        def __call__(self, x):
            return x * jnp.exp(0.1 * x[..., :1] * x[..., 1:2])

        def _inverse(self, y):
            raise NotImplementedError

        def log_abs_det_jacobian(self, x, y, intermediates=None):
            return jnp.sum(0.1 * x[..., :1] * x[..., 1:2], -1) * x.shape[-1]

    with pytest.raises(ValueError, match="not a sum over coordinates"):
        TransformedNormal(shape=(3,), constraint=constraints.real_vector, transform_=Coupled())


# --- the adapter: supports, overrides ---------------------------------------------------------


def _every_support_model():
    numpyro.sample("uniform", dist.Uniform(0.0, 10.0))
    numpyro.sample("pareto", dist.Pareto(1.0, 2.0))
    numpyro.sample("truncated", dist.TruncatedNormal(0.0, 1.0, low=0.0))
    numpyro.sample("truncated2", dist.TruncatedNormal(0.0, 1.0, low=-1.0, high=2.0))
    numpyro.sample("halfcauchy", dist.HalfCauchy(1.0))
    numpyro.sample("exponential", dist.Exponential(1.0))
    numpyro.sample("unit", dist.Beta(2.0, 2.0))
    numpyro.sample("weights", dist.Dirichlet(jnp.ones(3)))
    numpyro.sample("real", dist.Normal(0.0, 1.0))
    numpyro.sample("vector", dist.MultivariateNormal(jnp.zeros(2), jnp.eye(2)))
    base = dist.Normal(0.0, 1.0).expand([3]).to_event(1)
    numpyro.sample("cutpoints", dist.TransformedDistribution(base, transforms.OrderedTransform()))
    numpyro.sample("corr", dist.LKJCholesky(3, 2.0))
    numpyro.sample("chol", dist.TransformedDistribution(base, transforms.LowerCholeskyTransform()))
    with numpyro.plate("i", 3):
        numpyro.sample("bounded", dist.Uniform(jnp.arange(3.0), jnp.arange(3.0) + 2.0))


REGISTRY_FAMILIES = [
    (constraints.positive, "Gamma"),
    (constraints.nonnegative, "Gamma"),
    (constraints.softplus_positive, "Gamma"),
    (constraints.greater_than(2.0), "Affine[Gamma]"),
    (constraints.greater_than_eq(-1.0), "Affine[Gamma]"),
    (constraints.less_than(3.0), "Affine[Gamma]"),
    (constraints.less_than_eq(3.0), "Affine[Gamma]"),
    (constraints.interval(-1.0, 4.0), "Affine[Beta]"),
    (constraints.open_interval(0.0, 2.0), "Affine[Beta]"),
    (constraints.circular, "Affine[Beta]"),
    (constraints.unit_interval, "Beta"),
    (constraints.real, "Normal"),
    (constraints.real_vector, "Normal"),
    (constraints.simplex, "Dirichlet"),
    (constraints.ordered_vector, "TransformedNormal"),
    (constraints.positive_ordered_vector, "TransformedNormal"),
    (constraints.corr_cholesky, "TransformedNormal"),
    (constraints.lower_cholesky, "TransformedNormal"),
    (constraints.scaled_unit_lower_cholesky, "TransformedNormal"),
    (constraints.positive_definite, "TransformedNormal"),
]


def _registry_family(constraint):
    shape = {0: (2,), 1: (3,), 2: (3, 3)}[constraint.event_dim]
    return family_for_support("x", constraint, shape, constraint.event_dim)


def test_every_registry_support_maps_to_a_family():
    """``family_for_support`` on NumPyro's continuous constraints (what the adapter calls)."""
    for constraint, kind in REGISTRY_FAMILIES:
        family = _registry_family(constraint)
        name = type(family).__name__ + (
            f"[{type(family.base).__name__}]" if isinstance(family, Affine) else ""
        )
        assert name == kind, constraint


@pytest.mark.slow  # 20 s on CI (a program per family); the transformed normals' draws are
# checked in their support in the fast tier (test_transformed_normal_entropy_and_support)
def test_every_registry_familys_draws_are_in_the_support():
    for constraint, _ in REGISTRY_FAMILIES:
        family = _registry_family(constraint)
        draw = jax.jit(family.sample)(family.init_params(), jax.random.key(0))  # one program, not op by op
        assert bool(jnp.all(constraint(draw))), constraint


@pytest.mark.slow
def test_every_common_support_gets_a_family():
    adapted = from_numpyro(_every_support_model)
    kinds = {
        name: type(f).__name__ + (f"[{type(f.base).__name__}]" if isinstance(f, Affine) else "")
        for name, f in adapted.families.items()
    }
    assert kinds == {
        "uniform": "Affine[Beta]",
        "pareto": "Affine[Gamma]",
        "truncated": "Gamma",
        "truncated2": "Affine[Beta]",
        "halfcauchy": "Gamma",
        "exponential": "Gamma",
        "unit": "Beta",
        "weights": "Dirichlet",
        "real": "Normal",
        "vector": "Normal",
        "cutpoints": "TransformedNormal",
        "corr": "TransformedNormal",
        "chol": "TransformedNormal",
        "bounded": "Affine[Beta]",
    }
    np.testing.assert_array_equal(adapted.families["bounded"].bounds()[0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(adapted.families["bounded"].bounds()[1], [2.0, 3.0, 4.0])
    assert adapted.families["pareto"].bounds() == (1.0, np.inf)
    assert adapted.families["corr"].event_ndim == 2 and adapted.families["corr"].unconstrained_shape == (3,)
    # Every family's draws lie in its site's support and the log joint is finite there.
    params = {name: f.init_params() for name, f in adapted.families.items()}
    point = {name: f.sample(params[name], jax.random.key(3)) for name, f in adapted.families.items()}
    for name, value in point.items():
        assert bool(jnp.all(adapted.sites[name].support(value))), name
    assert np.isfinite(float(adapted.logdensity_fn(point, adapted.data)))
    # The point where a fit checks the model and evaluates its baseline is in every support
    # too: not E_q[z] for the correlation Cholesky factor (an average of them is no Cholesky
    # factor of a correlation matrix; the fit of an LKJ model stopped at its first check).
    at_means = inputs_at_means(params, adapted.families, log_space=True)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(at_means["corr"]), axis=-1), 1.0, rtol=1e-6)
    assert np.isfinite(float(adapted.joint.logdensity_fn(at_means, adapted.data)))
    local = adapted.joint.local_logdensity_fn(at_means, adapted.data)
    assert all(bool(jnp.all(jnp.isfinite(value))) for value in local.values())


def test_the_supports_refused_before_now_fit():
    """Uniform(0, 10), Pareto and TruncatedNormal(low=0) priors: defaults converge to the
    posterior (grid reference, one dimension each)."""
    y = jnp.asarray([2.1, -0.3, 1.4, 3.2, 0.2, 1.9])

    def model(y):
        sigma = numpyro.sample("sigma", dist.Uniform(0.0, 10.0))
        with numpyro.plate("n", y.shape[0]):
            numpyro.sample("y", dist.Normal(1.0, sigma), obs=y)

    result = from_numpyro(model, y).fit(progress=False)
    assert result.converged
    grid = np.linspace(1e-3, 10.0, 200_001)
    log_post = -len(y) * np.log(grid) - 0.5 * np.sum((np.asarray(y) - 1.0) ** 2) / grid**2
    weights = np.exp(log_post - log_post.max())
    mean = np.sum(grid * weights) / weights.sum()
    sd = np.sqrt(np.sum((grid - mean) ** 2 * weights) / weights.sum())
    assert abs(float(result.posterior["sigma"].mean()) - mean) < 0.25 * sd


SUPPORTS = {
    "uniform": (constraints.interval(0.0, 10.0), ()),
    "pareto": (constraints.greater_than(1.0), ()),
    "truncated": (constraints.greater_than_eq(0.0), ()),
    "halfcauchy": (constraints.positive, ()),
    "unit": (constraints.unit_interval, ()),
    "weights": (constraints.simplex, (3,)),
    "corr": (constraints.corr_cholesky, (3, 3)),
}


@pytest.mark.parametrize(
    "site, name",
    [("uniform", "beta"), ("uniform", "logitnormal"), ("pareto", "gamma"), ("pareto", "lognormal")],
)
def test_a_family_name_is_placed_on_the_sites_support(site, name):
    support, shape = SUPPORTS[site]
    chosen = family_for_support(site, support, shape, 0, name)
    assert isinstance(chosen, Affine) and type(chosen.base) is FAMILY_NAMES[name]
    lower, upper = chosen.bounds()
    assert (float(lower), float(upper)) == {"uniform": (0.0, 10.0), "pareto": (1.0, np.inf)}[site]


@pytest.mark.parametrize(
    "site, choice, message",
    [
        (
            "uniform",
            "gamma",
            r"site 'uniform': .*Gamma has support \(0, inf\), which is not inside .* \(0, 10\)",
        ),
        ("uniform", "lognormal", r"site 'uniform': the family LogNormal has support \(0, inf\)"),
        ("pareto", "beta", r"site 'pareto': .*Beta has support \(0, 1\), which is not inside .* \(1, inf\)"),
        ("halfcauchy", "normal", r"site 'halfcauchy': the family Normal has support \(-inf, inf\)"),
        ("pareto", grepvi.Gamma(), r"site 'pareto': .*Gamma has support \(0, inf\), which is not inside"),
        ("unit", "dirichlet", r"site 'unit': the family 'dirichlet' does not fit the site"),
        ("weights", "gamma", r"site 'weights': the family Gamma"),
        ("corr", "normal", r"site 'corr': .*not inside the site's support CorrCholesky"),
    ],
)
def test_an_override_outside_the_sites_support_is_refused(site, choice, message):
    support, shape = SUPPORTS[site]
    with pytest.raises(ModelError, match=message):
        family_for_support(site, support, shape, 0, choice)


def test_from_numpyro_refuses_a_wrong_override_and_names_what_fits():
    def model():
        numpyro.sample("sigma", dist.Uniform(0.0, 10.0))

    with pytest.raises(ModelError, match=r"site 'sigma': the family Gamma .* names that fit it .*'beta'"):
        from_numpyro(model, families={"sigma": "gamma"})
    assert isinstance(from_numpyro(model, families={"sigma": "beta"}).families["sigma"], Affine)


def test_an_override_inside_the_support_is_kept():
    beta = Affine(base=grepvi.Beta(), loc=2.0, scale=3.0)  # (2, 5) inside (0, 10)
    assert family_for_support("uniform", *SUPPORTS["uniform"], 0, beta) is beta
    gamma = grepvi.Gamma()  # (0, inf) inside [0, inf)
    assert family_for_support("truncated", *SUPPORTS["truncated"], 0, gamma) is gamma


def test_a_support_that_moves_with_other_latents_is_fitted_on_its_unconstrained_coordinate():
    def model():
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        numpyro.sample("x", dist.Uniform(0.0, tau))

    adapted = from_numpyro(model)  # tests/test_numpyro_moving_support.py: its answers
    assert adapted.moving == ("x",) and isinstance(adapted.families["x"], grepvi.Normal)


def test_a_discrete_latent_that_cannot_be_enumerated_is_named_by_its_distribution():
    def model():
        with numpyro.plate("i", 3):
            numpyro.sample("c", dist.Poisson(jnp.ones(3)))
        numpyro.sample("u", dist.Normal(0.0, 1.0))

    # a Categorical is summed out instead (tests/test_enumeration.py)
    with pytest.raises(ModelError, match=r"site 'c': a discrete latent site \(Poisson\) whose support"):
        from_numpyro(model)


def test_subsampled_plates_are_recorded():
    x = jnp.arange(20.0)

    def model(x):
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        with numpyro.plate("n", x.shape[0], subsample_size=5) as index:
            numpyro.sample("x", dist.Normal(0.0, tau), obs=x[index])

    adapted = from_numpyro(model, x)
    assert adapted.batch_size == 5
    plate = adapted.subsampled["n"]
    assert (plate.size, plate.subsample_size, plate.data_axes) == (20, 5, ((0,),))
    assert from_numpyro(_every_support_model).batch_size is None
    assert adapted.data[-1]["n"].shape == (20,)  # the plate's indices are data: every row
    # minibatch VI now (fitted in tests/test_numpyro_subsample.py): the old refusal is gone
    assert adapted.minibatch_problem(adapted.batch_size).scale == 4.0


# --- GrepGuide under NumPyro's ELBOs and Predictive, with plates ----------------------------------


def _plated_model():
    counts = jnp.asarray([[3.0, 5.0, 4.0, 2.0], [0.0, 1.0, 2.0, 0.0], [7.0, 6.0, 9.0, 8.0]])

    def model(counts):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        spread = numpyro.sample("spread", dist.Uniform(0.0, 5.0))
        with numpyro.plate("group", counts.shape[0], dim=-2):
            level = numpyro.sample("level", dist.Gamma(2.0, 2.0 / rate))
            weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(2)))
            numpyro.sample("mix", dist.Normal(weights[..., 0], spread))
            with numpyro.plate("n", counts.shape[1], dim=-1):
                numpyro.sample("x", dist.Poisson(level), obs=counts)

    return model, counts


@pytest.mark.slow  # 33 s on CI; GrepELBO's gradient test stays in the fast tier
def test_grep_guide_has_numpyros_event_dims_under_its_elbos_and_predictive():
    """One loss of each of NumPyro's ELBOs (and GrepELBO) with GrepGuide on a plated model, and
    ``Predictive``: before, Trace_ELBO raised "Model and guide event_dims disagree"."""
    from numpyro.infer import SVI, Predictive, Trace_ELBO, TraceMeanField_ELBO

    from grepvi.interop.numpyro_svi import GrepELBO, GrepGuide

    model, counts = _plated_model()
    guide = GrepGuide(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.05), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.key(0), counts))
    for elbo in (Trace_ELBO(), TraceMeanField_ELBO(), GrepELBO()):
        loss = jax.jit(lambda p, elbo=elbo: elbo.loss(jax.random.key(1), p, model, guide, counts))
        assert np.isfinite(float(loss(params)))
    draws = Predictive(guide, params=params, num_samples=5)(jax.random.key(1), counts)
    assert draws["level"].shape == (5, 3, 1) and draws["weights"].shape == (5, 3, 1, 2)


@pytest.mark.parametrize(
    "elbo_name",
    [
        pytest.param("Trace_ELBO", marks=pytest.mark.slow),
        pytest.param("TraceMeanField_ELBO", marks=pytest.mark.slow),
        pytest.param("GrepELBO", marks=pytest.mark.slow),
    ],
)
def test_grep_guide_runs_under_numpyros_elbos_and_predictive_with_plates(elbo_name):
    from numpyro.infer import SVI, Predictive, Trace_ELBO, TraceMeanField_ELBO

    from grepvi.interop.numpyro_svi import GrepELBO, GrepGuide

    model, counts = _plated_model()
    elbos = {"Trace_ELBO": Trace_ELBO, "TraceMeanField_ELBO": TraceMeanField_ELBO, "GrepELBO": GrepELBO}
    elbo = elbos[elbo_name]()
    guide = GrepGuide(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.05), elbo)
    result = svi.run(jax.random.key(0), 100, counts, progress_bar=False)
    assert np.all(np.isfinite(result.losses))
    draws = Predictive(guide, params=result.params, num_samples=50)(jax.random.key(1), counts)
    assert draws["level"].shape == (50, 3, 1) and draws["weights"].shape == (50, 3, 1, 2)
    assert draws["rate"].shape == (50,) and bool(jnp.all((draws["spread"] > 0) & (draws["spread"] < 5)))
    posterior_predictive = Predictive(model, guide=guide, params=result.params, num_samples=20)
    predictive = posterior_predictive(jax.random.key(2), counts)
    assert predictive["x"].shape == (20, 3, 4)


@pytest.mark.slow
def test_numpyros_trace_elbo_on_grep_guide_is_unbiased():
    """Trace_ELBO's gradient through GrepGuide (NumPyro's samplers of the same ``q``) and
    GrepELBO's G-REP gradient estimate the same ELBO gradient: their means over many particles
    agree within 5 standard errors, as do the losses."""
    from numpyro.infer import SVI, Trace_ELBO

    from grepvi.interop.numpyro_svi import GrepELBO, GrepGuide

    model, counts = _plated_model()
    guide = GrepGuide(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    params = jax.tree_util.tree_map(lambda v: v + 0.5, svi.get_params(svi.init(jax.random.key(0), counts)))

    def per_particle(elbo, n, seed):
        def one(key):
            return jax.value_and_grad(lambda p: elbo.loss(key, p, model, guide, counts))(params)

        loss, grads = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n))
        flat = np.concatenate([np.asarray(grads[k]).reshape(n, -1) for k in sorted(grads)], 1)
        return np.asarray(loss), flat

    n = 20_000
    loss_a, grad_a = per_particle(Trace_ELBO(), n, 1)
    loss_b, grad_b = per_particle(GrepELBO(), n, 2)
    se = np.sqrt(grad_a.var(0) / n + grad_b.var(0) / n)
    z = (grad_a.mean(0) - grad_b.mean(0)) / se
    assert np.max(np.abs(z)) < TOLERANCE, np.round(z, 2)
    assert abs(loss_a.mean() - loss_b.mean()) < TOLERANCE * np.sqrt(loss_a.var() / n + loss_b.var() / n)


# --- log space: each latent site's own density from the log-space draw ------------------------


def test_a_sites_own_density_comes_from_the_log_space_draw():
    """``joint``'s functions take ``log z`` (positive, simplex) and ``logit z`` (unit interval);
    a gamma, exponential, log-normal, inverse-gamma, beta or Dirichlet site's own density is
    computed from it in closed form, exact where ``z`` underflows float32 (``log z = -200``);
    the model's code sees ``z`` clamped (finite)."""
    from jax.scipy.special import gammaln

    def model():
        z = numpyro.sample("z", dist.Gamma(0.1, 2.0))
        e = numpyro.sample("e", dist.Exponential(3.0))
        ln = numpyro.sample("ln", dist.LogNormal(0.5, 2.0))
        ig = numpyro.sample("ig", dist.InverseGamma(2.0, 1.0))
        b = numpyro.sample("b", dist.Beta(0.5, 3.0))
        w = numpyro.sample("w", dist.Dirichlet(jnp.asarray([0.2, 1.0, 2.0])))
        numpyro.sample("obs", dist.Normal(jnp.log(z) + e + ln + ig + b + w[0], 1.0), obs=0.0)

    adapted = from_numpyro(model)
    u = {
        "z": jnp.asarray(-200.0),
        "e": jnp.asarray(-150.0),
        "ln": jnp.asarray(-120.0),
        "ig": jnp.asarray(3.0),
        "b": jnp.asarray(-100.0),
        "w": jnp.asarray([-300.0, -1.0, -0.3132617]),
    }
    local = adapted.joint.local_logdensity_fn(u, adapted.data)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in local.values())
    factors = {factor.name: factor for factor in adapted.joint.factors}
    own = {name: factors[name].fn(u, adapted.data) for name in u}
    expected_z = 0.1 * np.log(2.0) - float(gammaln(0.1)) + (0.1 - 1.0) * -200.0 - 2.0 * np.exp(-200.0)
    assert float(own["z"]) == pytest.approx(expected_z, rel=1e-6)
    assert float(own["e"]) == pytest.approx(np.log(3.0), rel=1e-6)
    expected_ln = -0.5 * ((-120.0 - 0.5) / 2.0) ** 2 - np.log(2.0) - 0.5 * np.log(2 * np.pi) + 120.0
    assert float(own["ln"]) == pytest.approx(expected_ln, rel=1e-6)
    expected_b = (
        (0.5 - 1.0) * -100.0
        + (3.0 - 1.0) * -np.log1p(np.exp(-100.0))
        + float(gammaln(3.5) - gammaln(0.5) - gammaln(3.0))
    )
    assert float(own["b"]) == pytest.approx(expected_b, rel=1e-5)
    alpha = np.asarray([0.2, 1.0, 2.0])
    expected_w = float(
        np.sum((alpha - 1) * np.asarray(u["w"])) + gammaln(alpha.sum()) - np.sum(gammaln(alpha))
    )
    assert float(own["w"]) == pytest.approx(expected_w, rel=1e-5)
    # The value-space functions are the same functions of z where z is representable.
    z = {"z": 0.3, "e": 0.2, "ln": 1.5, "ig": 2.0, "b": 0.4, "w": jnp.asarray([0.2, 0.3, 0.5])}
    z = {k: jnp.asarray(v) for k, v in z.items()}
    from numpyro.infer.util import log_density

    direct = log_density(model, (), {}, z)[0]
    assert float(adapted.logdensity_fn(z, adapted.data)) == pytest.approx(float(direct), rel=1e-5)


def test_advi_takes_the_transform_families():
    """ADVI's family for ``c + Gamma`` is ``c + LogNormal``; a TransformedNormal is its own."""
    from grepvi.estimators.advi import advi_family

    shifted = advi_family(Affine(base=grepvi.Gamma(shape=(2,)), loc=1.0, scale=1.0))
    assert isinstance(shifted, Affine) and isinstance(shifted.base, grepvi.LogNormal)
    assert float(shifted.bounds()[0]) == 1.0
    ordered = TransformedNormal(shape=(3,), constraint=constraints.ordered_vector)
    assert advi_family(ordered) is ordered

"""Models that take their latents in log space (``Target.log_space``, ``Model.log_space``).

The families draw ``log z`` (gamma, Dirichlet) and ``logit z`` (beta) exactly; a log-space
target receives those draws instead of ``z`` clamped to ``[1e-30, 1 - 1.6e-7]`` (float32).
Checked here:

* every estimator gives the same gradient, draw by draw for the same key, on a log-space
  target as on the value-space target of the same model, wherever no clamp is met (shapes 1
  and 10): the two spaces describe one density, so any difference is a bug;
* where the clamp is met (shape 0.1; a beta with ``concentration0 = 0.07`` puts 25% of its
  draws within 1.6e-7 of 1) the log-space estimators are unbiased (mean of many float32 draws
  within 5 standard errors of the exact gradient);
* ``log_matmul_exp`` keeps the scale of products of tiny factors, and the sparse gamma DEF and
  the beta-gamma MF compute their log joints and gradients in log space to float64 accuracy
  where float32 values underflow or round to 1;
* a family on the wrong support for a log-space model is refused, naming the latent.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import grepvi
from grepvi import numerics, testing
from grepvi.errors import ConfigError
from grepvi.estimators import get_estimator
from grepvi.models import beta_gamma_mf, sparse_gamma_def
from grepvi.target import Target

MAX_STANDARD_ERRORS = 5.0


def _conjugate(name, log_space, **family_options):
    if name == "gamma-poisson":
        return testing.gamma_poisson(shape=(3,), log_space=log_space)
    if name == "beta-bernoulli":
        return testing.beta_bernoulli(shape=(3,), log_space=log_space, **family_options)
    return testing.dirichlet_multinomial(batch_shape=(3,), log_space=log_space)


def _params(name, shapes):
    """Concentrations ``shapes`` (one per copy); the beta's other concentration is 0.7 x."""
    s = jnp.asarray(shapes, jnp.float32)
    inverse = numerics.inverse_softplus
    if name == "gamma-poisson":
        return {"rate": {"concentration": inverse(s), "mean": inverse(jnp.asarray([0.5, 4.0, 1.0]))}}
    if name == "beta-bernoulli":
        return {"prob": {"concentration1": inverse(s), "concentration0": inverse(0.7 * s)}}
    profile = jnp.asarray([1.0, 2.0, 0.5, 1.5])
    return {"probs": {"concentration": inverse(s[:, None] * profile)}}


def _target(model, estimator):
    families = estimator.adapt_families(model.families)
    return Target(model.logdensity_fn, families, model.local_logdensity_fn, log_space=model.log_space)


ESTIMATORS = ("grep", "bbvi", "advi", "implicit", "rsvi")
MODELS = ("gamma-poisson", "beta-bernoulli", "dirichlet-multinomial")


# The fast tier runs each estimator on one model and each model under two estimators; the other
# nine pairs (each a program of its own, 5-9 s on CI) run in the slow tier. BBVI's pair too
# (10-19 s): tests/test_bbvi_clamp.py compares its value-space and log-space estimates.
FAST_PAIRS = {
    ("grep", "gamma-poisson"),
    ("grep", "dirichlet-multinomial"),
    ("grep-closed-form", "beta-bernoulli"),
    ("advi", "dirichlet-multinomial"),
    ("implicit", "gamma-poisson"),
    ("rsvi", "beta-bernoulli"),
}


@pytest.mark.parametrize(
    "estimator_name, model_name",
    [
        pytest.param(e, m, marks=() if (e, m) in FAST_PAIRS else pytest.mark.slow)
        for e in ESTIMATORS + ("grep-closed-form",)
        for m in MODELS
    ],
)
def test_log_space_target_gives_the_value_space_gradient(estimator_name, model_name):
    """Same key, same draws: the gradient of a log-space target equals the value-space one
    (200 keys, shapes 1, 3 and 10, where no draw meets the clamp), to 1e-4 of each
    component's largest magnitude. The ELBO estimates agree too.

    In float64: in float32 the value-space path itself is off where a draw comes within ~1e-5
    of a boundary (the beta's ``log(1 - z)`` with ``1 - z`` resolved to 6e-8), which a
    Beta(1, 0.7) does in about 1 of 3,000 draws: BBVI's 1,600 draws here met one (2e-4 of the
    component's scale) once the sampler's bits changed. This test is about the two paths'
    algebra; the log-space path's float32 accuracy is tested at tiny shapes elsewhere."""
    with jax.enable_x64(True):
        _compare_log_space_with_value_space(estimator_name, model_name)


def _compare_log_space_with_value_space(estimator_name, model_name):
    if estimator_name == "grep-closed-form" and model_name == "dirichlet-multinomial":
        pytest.skip("grep-closed-form has no Dirichlet formulas (it refuses them)")
    options = {"num_samples": 4, "num_control_samples": 4} if estimator_name == "bbvi" else {}
    if estimator_name == "advi":
        options = {"num_elbo_samples": 0}
    estimator = get_estimator(estimator_name, **options)
    params = _params(model_name, [1.0, 3.0, 10.0])
    if estimator_name == "advi":
        family = next(iter(estimator.adapt_families(_conjugate(model_name, False).families).values()))
        params = {name: family.init_params(jax.random.key(1)) for name in params}
    params = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
    keys = jax.random.split(jax.random.key(3), 200)
    # the supplement's closed form exists for the beta with the zero-correction sigma
    beta = {"standardization": "zero-correction"} if estimator_name == "grep-closed-form" else {}
    results = []
    for log_space in (False, True):
        target = _target(_conjugate(model_name, log_space, **beta), estimator)
        run = jax.jit(
            lambda keys, params, t=target: jax.vmap(estimator.estimate, (0, None, None))(keys, params, t)
        )
        grads, info = run(keys, params)
        results.append((grads, info.elbo))
    (value_grads, value_elbo), (log_grads, log_elbo) = results
    for expected, got in zip(
        jax.tree_util.tree_leaves(value_grads), jax.tree_util.tree_leaves(log_grads), strict=True
    ):
        expected, got = np.asarray(expected, np.float64), np.asarray(got, np.float64)
        assert np.all(np.isfinite(got))
        scale = np.max(np.abs(expected), axis=0)
        error = np.abs(got - expected)
        assert np.all(error <= 1e-4 * scale + 1e-6), f"max error / scale {np.max(error / scale, axis=0)}"
    np.testing.assert_allclose(log_elbo, value_elbo, rtol=1e-4, atol=1e-4)


# G-REP on every model in the fast tier, RSVI on the beta-Bernoulli (its other two in the slow)
@pytest.mark.parametrize(
    "model_name, estimator_name",
    [
        pytest.param(m, e, marks=pytest.mark.slow) if e == "rsvi" and m != "beta-bernoulli" else (m, e)
        for e in ("grep", "rsvi")
        for m in MODELS
    ],
    ids=[f"{m}-{e}" for e in ("grep", "rsvi") for m in MODELS],
)
def test_log_space_estimators_unbiased_where_values_clamp(estimator_name, model_name):
    """Concentrations 0.1, 0.2 and 0.05 (the beta's other one 0.7 x: 0.07, 0.14, 0.035),
    where float32 values are clamped in up to half the draws: 40,000 log-space float32
    gradient draws have their mean within 5 standard errors of the exact gradient."""
    model = _conjugate(model_name, True)
    params = _params(model_name, [0.1, 0.2, 0.05])
    check = testing.check_unbiased(
        get_estimator(estimator_name), model, params, jax.random.key(5), num_draws=40_000
    )
    assert check.max_abs_z() < MAX_STANDARD_ERRORS, f"z-scores {check.z_scores}"


@pytest.mark.slow  # 17 s on CI; test_estimators_unbiased's implicit beta stays in the fast tier
def test_implicit_beta_unbiased_in_log_space_biased_in_values():
    """Implicit reparameterization of a beta at concentrations 0.3, 0.5, 1 (the other 0.7 x):
    in log space the mean of 40,000 float32 draws is within 5 SE of the exact gradient; with
    the value ``z`` (clamped at ``1 - 1.6e-7``) it is 14.7 SE off (measured), so the test can
    fail. Below concentrations of about 0.05 JAX's implicit derivative of ``loggamma`` is
    itself off in float32 (a Dirichlet at 0.025: -32 SE in either space), so implicit is not
    tested there."""
    params = _params("beta-bernoulli", [0.3, 0.5, 1.0])
    checks = [
        testing.check_unbiased(
            get_estimator("implicit"),
            _conjugate("beta-bernoulli", log_space),
            params,
            jax.random.key(5),
            40_000,
        )
        for log_space in (True, False)
    ]
    assert checks[0].max_abs_z() < MAX_STANDARD_ERRORS, f"z-scores {checks[0].z_scores}"
    assert checks[1].max_abs_z() > 2 * MAX_STANDARD_ERRORS, f"z-scores {checks[1].z_scores}"


# --- the models' numerics ----------------------------------------------------------------


def test_log_matmul_exp_keeps_the_scale_of_tiny_products():
    """Factors of ``e^-75`` to ``e^-55`` (float32 values near 1e-33 to 1e-24: products of two
    underflow): ``log_matmul_exp`` equals the float64 ``logsumexp`` to 1e-5; the product of
    the values rounds to 0 (``-inf`` after the log)."""
    rng = np.random.default_rng(0)
    log_a = rng.uniform(-75, -55, (7, 5)).astype(np.float32)
    log_b = rng.uniform(-75, -55, (5, 6)).astype(np.float32)
    expected = logsumexp(log_a.astype(np.float64)[:, :, None] + log_b.astype(np.float64)[None], axis=1)
    got = np.asarray(numerics.log_matmul_exp(jnp.asarray(log_a), jnp.asarray(log_b)))
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
    assert np.all(np.exp(log_a) @ np.exp(log_b) == 0.0)  # what z @ W gives in float32
    # its derivative: d/d log_a[n, k] = softmax weight of term k in row n, summed over d
    gradient = jax.grad(lambda a: jnp.sum(numerics.log_matmul_exp(a, jnp.asarray(log_b))))(jnp.asarray(log_a))
    weights = np.exp(log_a.astype(np.float64)[:, :, None] + log_b[None] - expected[:, None, :])
    np.testing.assert_allclose(gradient, weights.sum(-1), rtol=1e-4)


def _def_model():
    counts = np.random.default_rng(1).poisson(2.0, (4, 6)).astype(np.float32)
    return sparse_gamma_def(counts, layer_sizes=(3, 2))


def _def_log_latents(scale):
    """Log-space latents of the small DEF: the weights and top layer at ``exp(scale)``."""
    rng = np.random.default_rng(2)
    shapes = {"z1": (4, 3), "z2": (4, 2), "W0": (3, 6), "W1": (2, 3)}
    return {n: jnp.asarray(rng.normal(scale, 1.0, s), jnp.float32) for n, s in shapes.items()}


def test_sparse_gamma_def_log_joint_in_log_space_matches_values():
    """Where float32 values are harmless (``log z`` near 0), the log-space factors equal the
    value-space functions (which convert) and an independent float64 computation."""
    model = _def_model()
    log_latents = _def_log_latents(0.0)
    values = jax.tree.map(jnp.exp, log_latents)
    log_space = model.joint.logdensity_fn(log_latents, model.data)
    np.testing.assert_allclose(model.logdensity_fn(values, model.data), log_space, rtol=1e-5)
    z = {n: np.exp(np.asarray(v, np.float64)) for n, v in log_latents.items()}
    x = np.asarray(model.data["x"], np.float64)
    from scipy.stats import gamma, poisson

    alpha = model.hyperparameters["alpha_z"]
    expected = poisson.logpmf(x, z["z1"] @ z["W0"]).sum()
    mean = z["z2"] @ z["W1"]
    expected += gamma.logpdf(z["z1"], alpha, scale=mean / alpha).sum()
    expected += gamma.logpdf(z["z2"], 0.1, scale=1 / 0.1).sum()
    expected += sum(gamma.logpdf(z[w], 0.1, scale=1 / 0.3).sum() for w in ("W0", "W1"))
    np.testing.assert_allclose(log_space, expected, rtol=1e-5)


def test_sparse_gamma_def_gradient_is_exact_where_means_underflow():
    """Latents near ``e^-45`` (1e-20): prior means ``z2 W1`` near 1e-40, below float32's
    normal range, and ``alpha z1 / m^2`` overflows. The log-space gradient is finite and
    equals the float64 gradient of the same function to 1e-3."""
    model = _def_model()
    log_latents = _def_log_latents(-45.0)
    # compiled (run eagerly, each primitive of the DEF's gradient compiles on its own: 36 s)
    grad32 = jax.jit(jax.grad(model.joint.logdensity_fn))(log_latents, model.data)
    with jax.enable_x64(True):
        log64 = {n: jnp.asarray(v, jnp.float64) for n, v in log_latents.items()}
        data64 = jax.tree.map(lambda v: jnp.asarray(v, jnp.float64), model.data)
        grad64 = jax.jit(jax.grad(model.joint.logdensity_fn))(log64, data64)
        grad64 = jax.tree.map(np.asarray, grad64)
    for name in log_latents:
        got = np.asarray(grad32[name], np.float64)
        assert np.all(np.isfinite(got)), name
        np.testing.assert_allclose(got, grad64[name], rtol=1e-3, atol=1e-3 * np.abs(grad64[name]).max())
    # the value-space route (z = exp(log z) in float32) cannot: the means round to 0
    values = jax.tree.map(jnp.exp, log_latents)
    assert float(jnp.min(values["z2"] @ values["W1"])) == 0.0


def test_beta_gamma_mf_takes_logits_beyond_float32_rounding():
    """A beta draw with ``logit z = 25`` (``z`` rounds to 1 in float32): the MF's log-space
    likelihood equals float64's; through the value ``z`` (clamped at ``1 - 1.6e-7``) the
    logit would be 15.9."""
    x = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    model = beta_gamma_mf(x, num_factors=1)
    log_latents = {"z": jnp.asarray([[25.0], [-30.0]]), "w": jnp.asarray([[0.0, -1.0]])}
    got = model.joint.logdensity_fn(log_latents, model.data)
    logits = np.array([[25.0], [-30.0]]) @ np.exp(np.array([[0.0, -1.0]]))
    likelihood = -np.logaddexp(0.0, -(2 * x - 1) * logits).sum()
    from scipy.stats import gamma

    expected = likelihood + gamma.logpdf(np.exp([0.0, -1.0]), 0.1, scale=1 / 0.3).sum()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    clamped = float(numerics.safe_sigmoid(jnp.float32(25.0)))
    assert np.log(clamped) - np.log1p(-clamped) < 16.0


def test_log_space_model_refuses_a_family_on_another_support():
    model = _def_model()
    families = model.latents()
    families["W0"] = grepvi.Normal(shape=families["W0"].shape)
    with pytest.raises(ConfigError, match=r"latents\['W0'\].*'positive'"):
        model.target(families)


def test_exp_linear_tail_is_exp_below_30_and_finite_above():
    x = jnp.asarray([-100.0, 0.0, 10.0, 29.9, 30.0, 30.1, 1e3, 1e7], jnp.float32)
    value = np.asarray(numerics.exp_linear_tail(x), np.float64)
    slope = np.asarray(jax.vmap(jax.grad(numerics.exp_linear_tail))(x), np.float64)
    np.testing.assert_allclose(value[:5], np.exp(np.asarray(x[:5], np.float64)), rtol=1e-5, atol=1e-38)
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(slope)) and np.all(np.diff(value) > 0)
    np.testing.assert_allclose(slope[4:], np.exp(30.0), rtol=1e-5)  # continuous derivative at 30
    np.testing.assert_allclose(value[5], np.exp(30.0) * 1.1, rtol=1e-5)


def test_log_matmul_exp_derivative_where_the_plain_one_is_nan():
    """An entry whose terms sit far below the row's and the column's maxima (shifted product
    ``e^-60 = 9e-27``) with a cotangent of 1e20: the plain VJP divides to 1e46 (inf) and
    multiplies by an underflowed ``e^-200 = 0`` (NaN); the scaled VJP equals the float64
    softmax-weighted sum."""
    log_a = jnp.asarray([[0.0, -60.0], [-1.0, -2.0]], jnp.float32)
    log_b = jnp.asarray([[-200.0], [0.0]], jnp.float32)
    cotangent = jnp.asarray([[1e20], [1.0]], jnp.float32)

    def plain(a, b):
        sa = jax.lax.stop_gradient(jnp.max(a, -1, keepdims=True))
        sb = jax.lax.stop_gradient(jnp.max(b, -2, keepdims=True))
        return jnp.log(jnp.exp(a - sa) @ jnp.exp(b - sb)) + sa + sb

    def grads(fn):
        return jax.grad(lambda a, b: jnp.sum(cotangent * fn(a, b)), argnums=(0, 1))(log_a, log_b)

    assert not all(np.all(np.isfinite(g)) for g in grads(plain))
    ours = grads(numerics.log_matmul_exp)
    a64, b64, g64 = (np.asarray(v, np.float64) for v in (log_a, log_b, cotangent))
    out = logsumexp(a64[:, :, None] + b64[None], axis=1)
    weights = np.exp(a64[:, :, None] + b64[None] - out[:, None, :])  # (n, k, d)
    expected_a = np.einsum("nd,nkd->nk", g64, weights)
    expected_b = np.einsum("nd,nkd->kd", g64, weights)
    np.testing.assert_allclose(ours[0], expected_a, rtol=1e-4, atol=1e-30)
    np.testing.assert_allclose(ours[1], expected_b, rtol=1e-4, atol=1e-30)


def test_grep_gradients_finite_at_the_shape_floor():
    """Every gamma of a small DEF at shape 1e-5 (``log z`` spread over +-1e5, what Eq. 9's
    first steps at eta = 5 make of Olivetti's top layers): 200 G-REP gradient draws of the
    log-space target are all finite (with a plain ``exp`` in the priors, and the plain VJP of
    ``log_matmul_exp``, 98.6% of Olivetti's steps had a non-finite gradient)."""
    model = _def_model()
    target = model.target()
    params = {
        name: {"concentration": jnp.full(f.shape, -11.5), "mean": jnp.full(f.shape, 0.5)}
        for name, f in target.families.items()
    }
    estimator = get_estimator("grep")

    def one(key):
        from grepvi.target import bind_data

        grad, _ = estimator.estimate(key, params, bind_data(target, model.data))
        return grad

    grads = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), 200))
    for leaf in jax.tree_util.tree_leaves(grads):
        assert np.all(np.isfinite(np.asarray(leaf)))


def test_log_space_means_match_and_stay_finite_where_the_mean_overflows():
    """``Family.log_space_mean`` is ``log``/``logit`` of ``E_q[z]``, and finite where the mean
    itself overflows or rounds: ADVI's log-normal weights on Omniglot reached a mean beyond
    float32 after 600 s, and the refit's check of the model at the means was NaN."""
    from grepvi.families import Beta, Dirichlet, Gamma, LogitNormal, LogNormal

    key = jax.random.key(3)
    for family in (Gamma((4,)), Beta((4,)), LogNormal((4,)), LogitNormal((4,)), Dirichlet((2, 3))):
        params = family.init_params(key)
        np.testing.assert_allclose(
            family.log_space_mean(params), family.to_log_space(family.mean(params)), rtol=1e-5, atol=1e-6
        )
    lognormal = LogNormal((2,))
    far = {"loc": jnp.array([100.0, -1.0]), "scale": jnp.array([0.5, 0.5])}
    assert not np.isfinite(lognormal.mean(far)[0])
    scale = float(numerics.softplus(jnp.array(0.5)))
    np.testing.assert_allclose(
        lognormal.log_space_mean(far), [100.0 + scale**2 / 2, -1.0 + scale**2 / 2], rtol=1e-6
    )
    logitnormal = LogitNormal((1,))
    assert np.isfinite(logitnormal.log_space_mean({"loc": jnp.array([60.0]), "scale": jnp.array([-3.0])}))[0]
    beta = Beta((1,))
    params = beta.init_params(key)
    assert np.all(np.isfinite(beta.log_space_mean(params)))


def test_advi_on_the_mf_is_checked_finite_with_weights_beyond_float32():
    """The model check at the families' means (``inference.check_target``) on the beta-gamma
    MF with ADVI's families and a log-normal weight whose mean overflows: finite in log space."""
    from grepvi.families import LogitNormal, LogNormal
    from grepvi.inference.state import check_target

    x = (np.random.default_rng(0).random((6, 5)) < 0.3).astype(np.float32)
    model = beta_gamma_mf(x, num_factors=2)
    target = model.target()
    families = {"z": LogitNormal((6, 2)), "w": LogNormal((2, 5))}
    target = target._replace(families=families)
    params = {name: family.init_params(jax.random.key(0)) for name, family in families.items()}
    params["w"] = {**params["w"], "loc": params["w"]["loc"].at[0, 0].set(100.0)}
    assert not np.all(np.isfinite(families["w"].mean(params["w"])))
    check_target(target, params, model.data)  # raised ModelError (NaN) with the means formed

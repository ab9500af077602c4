"""The paper's models (sparse gamma DEF, beta-gamma MF) and the named-axes factor machinery.

* local log joints against their definition (change one element, recompute everything);
* G-REP (and BBVI when registered) with the local log joints against G-REP with the whole
  log joint: same mean gradient (a Monte Carlo test, see ``test_local_gradients_unbiased``);
* fits on data simulated from each model raise the ELBO and recover the true rates;
* data validation, and the Olivetti-size step (slow).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi.errors import ConfigError, DataError, ModelError
from grepvi.estimators import Estimator, get_estimator
from grepvi.estimators.base import sample_standardized
from grepvi.estimators.grep import grep_surrogate
from grepvi.families import Beta, Dirichlet, Gamma
from grepvi.models import (
    Factor,
    beta_gamma_mf,
    log_joint,
    sparse_gamma_def,
)
from grepvi.target import Target, inputs_from_values
from grepvi.testing import check_local_log_joints, gradient_draws

# Hyperparameters for simulated data: the paper's (shape 0.1 everywhere) give ~96% zeros and
# a few counts in the thousands at N = 60, D = 40; shape 1 gives counts with signal in every row.
DENSE_DEF = dict(alpha_z=1.0, weight_shape=1.0, weight_rate=1.0, top_shape=1.0, top_rate=1.0)


def _small_models():
    def_model = sparse_gamma_def(np.zeros((4, 5)), layer_sizes=(3, 3, 2), **DENSE_DEF)
    counts, _ = def_model.sample(jax.random.key(0))
    mf_model = beta_gamma_mf(np.zeros((4, 5)), num_factors=3)
    binary, _ = mf_model.sample(jax.random.key(1))
    return {"sparse_gamma_def": def_model.with_data(counts), "beta_gamma_mf": mf_model.with_data(binary)}


SMALL = _small_models()


def _random_point(model, seed, dtype=jnp.float32):
    """A point in the support: gamma(2, 2) draws, uniform(0.05, 0.95) for beta latents."""
    rng = np.random.default_rng(seed)
    point = {}
    for name, family in model.latents().items():
        if isinstance(family, Beta):
            value = rng.uniform(0.05, 0.95, family.shape)
        else:
            value = rng.gamma(2.0, 0.5, family.shape)
        point[name] = jnp.asarray(value, dtype)
    return point


# --- local log joints ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_local_log_joints_match_brute_force(name):
    """Changing one element changes the whole log joint exactly as much as its local one.

    Every latent, four random elements each, in float64 (differences of sums of ~50 terms).
    """
    model = SMALL[name]
    with jax.enable_x64(True):
        point = _random_point(model, 2, jnp.float64)
        check = check_local_log_joints(*model.bound(), point, seed=3, num_elements=4)
        shapes = {n: v.shape for n, v in jax.eval_shape(model.bound()[1], point).items()}
    assert set(check.latent) == set(model.latent_shapes)
    assert len(check.latent) == 4 * len(model.latent_shapes)
    assert np.all(np.abs(check.full_difference) > 1e-6)  # every change mattered
    np.testing.assert_allclose(check.local_difference, check.full_difference, rtol=1e-9, atol=1e-9)
    assert shapes == model.latent_shapes


def test_sparse_gamma_def_structure():
    model = sparse_gamma_def(np.ones((6, 7)), layer_sizes=(3, 2, 2))
    assert model.latent_axes == {
        "W0": ("k1", "d"),
        "W1": ("k2", "k1"),
        "W2": ("k3", "k2"),
        "z1": ("n", "k1"),
        "z2": ("n", "k2"),
        "z3": ("n", "k3"),
    }
    assert model.joint.blankets["z2"] == ("z1_prior", "z2_prior")
    assert model.joint.blankets["W0"] == ("likelihood", "W0_prior")
    assert model.joint.dependencies["z1_prior"] == ("W1", "z1", "z2")
    assert model.local_latent_names == ("z1", "z2", "z3")
    assert model.global_latent_names == ("W0", "W1", "W2")
    families = model.latents()
    assert all(isinstance(family, Gamma) for family in families.values())
    assert {n: f.shape for n, f in families.items()} == model.latent_shapes
    # Paper sizes: 463,800 latent variables at Olivetti size.
    olivetti = sparse_gamma_def(np.zeros((320, 4096)))
    assert sum(int(np.prod(s)) for s in olivetti.latent_shapes.values()) == 463_800


def test_paper_log_joint_by_hand():
    """The log joint equals a direct transcription of the paper's model (scipy densities)."""
    from scipy import stats

    model = sparse_gamma_def(np.array([[0.0, 3.0], [1.0, 2.0]]), layer_sizes=(2, 1))
    z = {
        "z1": np.array([[0.5, 2.0], [1.5, 0.3]]),
        "z2": np.array([[0.7], [1.2]]),
        "W0": np.array([[0.2, 1.1], [0.9, 0.4]]),
        "W1": np.array([[1.3, 0.6]]),
    }
    x = np.asarray(model.observations)
    expected = stats.poisson.logpmf(x, z["z1"] @ z["W0"]).sum()
    mean1 = z["z2"] @ z["W1"]
    expected += stats.gamma.logpdf(z["z1"], 0.1, scale=mean1 / 0.1).sum()
    expected += stats.gamma.logpdf(z["z2"], 0.1, scale=1 / 0.1).sum()
    expected += sum(stats.gamma.logpdf(z[w], 0.1, scale=1 / 0.3).sum() for w in ("W0", "W1"))
    with jax.enable_x64(True):
        value = float(jax.jit(model.logdensity_fn)({k: jnp.asarray(v) for k, v in z.items()}, model.data))
        per_entry = model.observation_loglik({k: jnp.asarray(v) for k, v in z.items()}, model.data)
    np.testing.assert_allclose(value, expected, rtol=1e-6)  # data constants (log x!) are float32
    np.testing.assert_allclose(per_entry, stats.poisson.logpmf(x, z["z1"] @ z["W0"]), rtol=1e-6)

    mf = beta_gamma_mf(np.array([[0.0, 1.0, 1.0]]), num_factors=2)
    zz = {"z": np.array([[0.2, 0.9]]), "w": np.array([[0.5, 1.5, 0.1], [2.0, 0.3, 0.7]])}
    logits = (np.log(zz["z"] / (1 - zz["z"]))) @ zz["w"]
    p = 1 / (1 + np.exp(-logits))
    x = np.asarray(mf.observations)
    expected = stats.bernoulli.logpmf(x, p).sum() + stats.gamma.logpdf(zz["w"], 0.1, scale=1 / 0.3).sum()
    with jax.enable_x64(True):
        value = float(jax.jit(mf.logdensity_fn)({k: jnp.asarray(v) for k, v in zz.items()}, mf.data))
        mean = mf.mean_observation({k: jnp.asarray(v) for k, v in zz.items()})
    np.testing.assert_allclose(value, expected, rtol=1e-6)  # data constants (log x!) are float32
    np.testing.assert_allclose(mean, p, rtol=1e-10)


def test_bernoulli_log_likelihood_is_stable_at_large_logits():
    model = beta_gamma_mf(np.array([[1.0, 0.0]]), num_factors=1)
    z = {"z": jnp.array([[1.0 - 1e-7]]), "w": jnp.array([[1e4, 1e4]])}  # logits ~ 1.6e5
    per_entry = np.asarray(model.observation_loglik(z, model.prepare_data(np.array([[1.0, 0.0]]))))
    assert per_entry[0, 0] == 0.0 and np.isfinite(per_entry[0, 1]) and per_entry[0, 1] < -1e5


# --- the machinery on a user's model ----------------------------------------------------------


def _custom_model(broken=False):
    """Poisson factorization with simplex rows and a global scale: ``x_nd ~ Poisson(sum_k
    theta_nk beta_kd)``, ``theta_n ~ Dirichlet(0.5)``, ``beta_kd ~ Gamma(1, scale)``,
    ``scale ~ Exponential(1)``. ``broken`` adds a factor that breaks the axes rule."""

    def likelihood(z, data):
        rate = z["theta"] @ z["beta"]
        counts = data["x"]
        return counts * jnp.log(rate) - rate - jax.scipy.special.gammaln(counts + 1.0)

    factors = [
        Factor("likelihood", ("n", "d"), likelihood),
        Factor("theta_prior", ("n",), lambda z, d: jnp.sum(-0.5 * jnp.log(z["theta"]), axis=1)),
        Factor("beta_prior", ("k", "d"), lambda z, d: jnp.log(z["scale"]) - z["scale"] * z["beta"]),
        Factor("scale_prior", (), lambda z, d: -z["scale"]),
    ]
    if broken:  # element n reads row n + 1 of theta: not what the axes say
        factors.append(Factor("shifted", ("n",), lambda z, d: jnp.roll(z["theta"][:, 0], 1)))
    return log_joint(
        factors,
        latent_axes={"theta": ("n", "k"), "beta": ("k", "d"), "scale": ()},
        axis_sizes={"n": 3, "k": 2, "d": 4},
        event_ndims={"theta": 1},
        data_axes={"x": ("n", "d")},
    )


CUSTOM_DATA = {"x": jnp.array([[1.0, 0.0, 3.0, 2.0], [2.0, 5.0, 0.0, 1.0], [0.0, 1.0, 1.0, 4.0]])}


def _bound(joint):
    return (
        lambda z: joint.logdensity_fn(z, CUSTOM_DATA),
        lambda z: joint.local_logdensity_fn(z, CUSTOM_DATA),
    )


def _custom_point():
    return {
        "theta": jnp.array([[0.3, 0.7], [0.6, 0.4], [0.1, 0.9]]),
        "beta": jnp.array([[0.5, 1.5, 0.2, 1.0], [2.0, 0.3, 0.7, 1.1]]),
        "scale": jnp.array(1.3),
    }


def test_custom_model_local_log_joints():
    joint = _custom_model()
    assert joint.blankets == {
        "beta": ("likelihood", "beta_prior"),
        "scale": ("beta_prior", "scale_prior"),
        "theta": ("likelihood", "theta_prior"),
    }
    assert joint.local_axes["theta"] == ("n",)
    with jax.enable_x64(True):
        point = {k: v.astype(jnp.float64) for k, v in _custom_point().items()}
        local = joint.local_logdensity_fn(point, CUSTOM_DATA)
        assert {k: v.shape for k, v in local.items()} == {"theta": (3,), "beta": (2, 4), "scale": ()}
        # scale's local log joint: the whole beta prior plus its own prior.
        expected = jnp.sum(jnp.log(point["scale"]) - point["scale"] * point["beta"]) - point["scale"]
        np.testing.assert_allclose(local["scale"], expected, rtol=1e-12)
        check = check_local_log_joints(
            *_bound(joint),
            point,
            seed=0,
            num_elements=3,
            local_shapes={"theta": (3,)},
        )
        np.testing.assert_allclose(check.local_difference, check.full_difference, rtol=1e-9, atol=1e-9)
        total, both = joint.logdensity_and_local_fn(point, CUSTOM_DATA)
        np.testing.assert_allclose(total, joint.logdensity_fn(point, CUSTOM_DATA), rtol=1e-12)
        for name in local:
            np.testing.assert_allclose(both[name], local[name], rtol=1e-12)
        # A factor that breaks the axes rule is caught by the brute-force check.
        broken = _custom_model(broken=True)
        check = check_local_log_joints(
            *_bound(broken),
            point,
            seed=0,
            num_elements=3,
            local_shapes={"theta": (3,)},
        )
        assert check.max_relative_error() > 1e-3


@pytest.mark.slow
def test_custom_model_fits_with_grepvi():
    """The machinery's functions plug into ``grepvi.fit`` as they are (few steps)."""
    joint = _custom_model()
    families = {"theta": Dirichlet((3, 2)), "beta": Gamma((2, 4)), "scale": Gamma(())}
    result = grepvi.fit(
        joint.logdensity_fn,
        families,
        num_steps=200,
        step_size=0.5,
        local_logdensity_fn=joint.local_logdensity_fn,
        data=CUSTOM_DATA,
        progress=False,
    )
    assert np.all(np.isfinite(result.trace.elbo))
    assert np.mean(result.trace.elbo[-20:]) > np.mean(result.trace.elbo[:20])


def test_each_factor_evaluated_once_per_call():
    calls = []

    def counted(name, fn):
        def wrapped(z, data):
            calls.append(name)
            return fn(z, data)

        return wrapped

    joint = _custom_model()
    factors = [item._replace(fn=counted(item.name, item.fn)) for item in joint.factors]
    joint = log_joint(factors, joint.latent_axes, joint.axis_sizes, {"theta": 1}, joint.data_axes)
    names = [item.name for item in factors]
    for fn in (joint.logdensity_fn, joint.local_logdensity_fn, joint.logdensity_and_local_fn):
        calls.clear()
        jax.jit(fn).lower(_custom_point(), CUSTOM_DATA)
        assert sorted(calls) == sorted(names)


@pytest.mark.parametrize(
    "factors, latent_axes, sizes, message",
    [
        (
            [Factor("f", ("n",), lambda z, d: z["a"][:2])],
            {"a": ("n",)},
            {"n": 3},
            "expected one array of shape",
        ),
        ([Factor("f", ("n",), lambda z, d: z["b"])], {"a": ("n",)}, {"n": 3}, "factor 'f' failed"),
        ([Factor("f", ("m",), lambda z, d: z["a"])], {"a": ("n",)}, {"n": 3}, "no size"),
        (
            [Factor("f", ("n",), lambda z, d: z["a"])],
            {"a": ("n",), "b": ("n",)},
            {"n": 3},
            "read by no factor",
        ),
        (
            [Factor("f", ("n",), lambda z, d: z["a"]), Factor("f", ("n",), lambda z, d: z["a"])],
            {"a": ("n",)},
            {"n": 3},
            "unique",
        ),
        ([Factor("f", "n", lambda z, d: z["a"])], {"a": ("n",)}, {"n": 3}, "tuple of axis names"),
        ([Factor("f", ("n", "n"), lambda z, d: z["a"])], {"a": ("n",)}, {"n": 3}, "appears twice"),
    ],
)
def test_log_joint_errors(factors, latent_axes, sizes, message):
    with pytest.raises(ModelError, match=message):
        log_joint(factors, latent_axes, sizes)


# --- gradients: local log joints vs the whole log joint ---------------------------------------


def _params_for_gradient_test(model, rng_key, shapes):
    """Random ``q`` parameters with shapes in ``shapes`` and means (gamma) or second shapes
    (beta, relative to the first) in ``[0.5, 1.5]``."""
    params = {}
    families = sorted(model.latents().items())
    for key, (name, family) in zip(jax.random.split(rng_key, len(families)), families, strict=True):
        key_a, key_b = jax.random.split(key)
        first = jax.random.uniform(key_a, family.shape, minval=shapes[0], maxval=shapes[1])
        second = jax.random.uniform(key_b, family.shape, minval=0.5, maxval=1.5)
        if isinstance(family, Beta):
            natural = {"concentration1": first, "concentration0": first * second}
        else:
            natural = {"concentration": first, "mean": second}
        params[name] = {k: grepvi.numerics.inverse_softplus(v) for k, v in natural.items()}
    return params


def _paired(targets: dict, others: dict) -> Estimator:
    """One estimator returning ``{label: gradient}``: G-REP (the ``grep`` estimator's single
    draw, ``grad`` of :func:`grep_surrogate`) for each of ``targets`` at the *same* ``eps``,
    and each ``(estimator, target)`` of ``others`` on the same key. One compilation, and the
    draws are paired by key."""

    def estimate(rng_key, params, target):
        families = target.families
        eps = sample_standardized(rng_key, params, families)
        grads = {}
        for label, own_target in targets.items():
            grads[label], elbo = jax.grad(grep_surrogate, has_aux=True)(params, eps, own_target)
        for label, (estimator, own_target) in others.items():
            grads[label], _ = estimator.estimate(rng_key, params, own_target)
        return grads, grepvi.EstimateInfo(elbo=elbo)

    return Estimator(name="paired", estimate=estimate)


# Shapes of q: the DEF's layer priors have E[1 / (z2 W1)^2] finite only for shapes above ~1
# (a sum of K2 = 2 products of gamma(a) variates has density ~ t^(2a - 1) near 0).
GRADIENT_TEST_SHAPES = {"sparse_gamma_def": (1.5, 3.0), "beta_gamma_mf": (0.5, 1.5)}


def _gradient_test_model(name):
    """Small instances: two DEF layers (four gamma latents; every kind of factor) or K = 3."""
    if name == "sparse_gamma_def":
        prior = sparse_gamma_def(np.zeros((4, 5)), layer_sizes=(3, 2), **DENSE_DEF)
    else:
        prior = beta_gamma_mf(np.zeros((4, 5)), num_factors=3)
    data, _ = prior.sample(jax.random.key(0))
    return prior.with_data(data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_local_gradients_unbiased(name):
    """G-REP with the local log joints has the mean of G-REP with the whole log joint.

    Both are Monte Carlo and share their ``eps`` draw by draw, so the test is on the per-draw
    difference ``d``: ``|mean(d)| < 5 sd(d) / sqrt(num_draws)`` for every component, a valid
    standard error whatever the correlation of the two (the ``g_rep`` parts cancel exactly;
    ``d`` is the difference of the correction terms, the only place local log joints enter).
    BBVI (registered as "bbvi"; 2 + 2 draws per call, unbiased for any number) with the local
    log joints is checked on the same keys against the same reference. 54 (MF) and 82 (DEF)
    components: a false failure at 5 standard errors has probability ~5e-5 for Gaussian means
    (measured maxima: 2.6 and 2.0 for G-REP, 1.8 and 1.9 for BBVI).

    Power. Dropping the likelihood from the local latent's blanket ("wrong") shifts the mean
    gradient by 10 (DEF) and 18 (MF) standard errors of the local-vs-wrong difference, so agreeing with the
    reference is not a matter of the correction term being negligible. Against the noisy
    whole-log-joint reference the same error is only 3-6 standard errors at these draws
    (measured): G-REP's correction term is small at these shapes, and the exact test of the
    local log joints is ``test_local_log_joints_match_brute_force``.
    """
    model = _gradient_test_model(name)
    families = model.latents()
    logdensity_fn, local_logdensity_fn = model.bound()  # small data: constants are fine here
    full = Target(logdensity_fn, families)
    local = Target(logdensity_fn, families, local_logdensity_fn)
    dropped = model.local_latent_names[0]

    def wrong_local(latents):
        values = local_logdensity_fn(latents)
        # the factors take log-space latents (Model.log_space); these are values
        inputs = inputs_from_values(latents, families, True)
        likelihood = model.joint.factor_values_fn(inputs, model.data)["likelihood"]
        values[dropped] = values[dropped] - jnp.sum(likelihood, axis=1, keepdims=True)
        return values

    wrong = Target(logdensity_fn, families, wrong_local)
    others = {}
    if "bbvi" in grepvi.estimator_names():
        others["bbvi"] = (get_estimator("bbvi", num_samples=2, num_control_samples=2), local)
    labels = ["full", "local", "wrong", *others]
    estimator = _paired({"full": full, "local": local, "wrong": wrong}, others)
    params = _params_for_gradient_test(model, jax.random.key(5), GRADIENT_TEST_SHAPES[name])
    num_draws = 100_000
    draws = gradient_draws(estimator, full, params, jax.random.key(6), num_draws, batch_size=25_000)
    assert np.all(np.isfinite(draws))
    # gradient_draws flattens {label: grad} leaf by leaf (labels in sorted order): cut the
    # columns back into one block per label along the same flattening.
    leaves = jax.tree_util.tree_flatten_with_path({label: params for label in labels})[0]
    start, blocks = 0, {label: [] for label in labels}
    for path, leaf in leaves:
        blocks[path[0].key].append(draws[:, start : start + leaf.size])
        start += leaf.size
    assert start == draws.shape[1]
    columns = {label: np.concatenate(parts, axis=1) for label, parts in blocks.items()}

    def z_scores(label, reference="full"):
        difference = columns[label] - columns[reference]
        se = difference.std(0, ddof=1) / np.sqrt(num_draws)
        return np.abs(difference.mean(0)) / np.maximum(se, 1e-12)

    assert z_scores("local").max() < 5.0
    assert z_scores("wrong", reference="local").max() > 8.0
    # The local log joints reduce the variance (the point of using them; measured 6% and 15%).
    assert columns["local"].var(0).sum() < 0.3 * columns["full"].var(0).sum()
    if others:
        assert z_scores("bbvi").max() < 5.0


# --- fits on simulated data -------------------------------------------------------------------


def _check_fit(model, truth, result, min_correlation):
    trace = result.trace.elbo
    tenth = len(trace) // 10
    first, last = trace[:tenth], trace[-tenth:]
    # medians and MAD-based standard errors (as the controller's windows): the first tenth's
    # one-draw ELBOs are heavy-tailed (the MF at eta 2: mean -43,800, median -7,600; the last
    # tenth -3,360), and their variance hid a rise of 40,000 nats behind a z of 4.4
    mad_se = lambda x: 1.4826 * np.median(np.abs(x - np.median(x))) / np.sqrt(x.size)
    se = np.sqrt(mad_se(first) ** 2 + mad_se(last) ** 2)
    assert np.median(last) - np.median(first) > 5 * se
    deciles = trace[: 10 * tenth].reshape(10, tenth).mean(1)
    assert np.all(deciles[5:] > deciles[0])  # no collapse after the start
    assert result.num_skipped_steps == 0
    means = {name: posterior.mean() for name, posterior in result.posterior.items()}
    fitted = np.asarray(model.mean_observation(means)).ravel()
    true = np.asarray(model.mean_observation(truth)).ravel()
    data = np.asarray(model.observations).ravel()
    correlation = np.corrcoef(fitted, true)[0, 1]
    assert correlation > min_correlation
    assert correlation > np.corrcoef(data, true)[0, 1]  # the fit denoises the data
    return correlation


@pytest.mark.slow
def test_sparse_gamma_def_fit_recovers_rates():
    """Two layers (4, 2), N = 60, D = 40, counts simulated with shape-1 hyperparameters.

    The raw counts correlate 0.96 with the true Poisson rates (Poisson noise); the fitted
    rates ``z1 W0`` at the posterior means must beat that and exceed 0.9 (measured: 0.99 at
    1000 steps, eta = 1; a fit that learnt nothing gives near-constant rates).
    """
    prior = sparse_gamma_def(np.zeros((60, 40)), layer_sizes=(4, 2), **DENSE_DEF)
    counts, truth = prior.sample(jax.random.key(0))
    model = prior.with_data(counts)
    result = grepvi.fit(
        model.logdensity_fn,
        model.latents(),
        num_steps=1000,
        step_size=1.0,
        local_logdensity_fn=model.local_logdensity_fn,
        data=model.data,
        progress=False,
    )
    _check_fit(model, truth, result, 0.9)


@pytest.mark.slow
def test_beta_gamma_mf_fit_recovers_probabilities():
    """K = 5, N = 100, D = 50, the paper's priors. Binary data are weakly informative: the
    data correlate 0.47 with the true probabilities; the fitted ``sigmoid(logit(z) w)`` at
    the posterior means must beat that and exceed 0.6 (measured 0.78 at 2000 steps, eta 2)."""
    prior = beta_gamma_mf(np.zeros((100, 50)), num_factors=5)
    binary, truth = prior.sample(jax.random.key(0))
    model = prior.with_data(binary)
    result = grepvi.fit(
        model.logdensity_fn,
        model.latents(),
        num_steps=2000,
        step_size=2.0,
        local_logdensity_fn=model.local_logdensity_fn,
        data=model.data,
        progress=False,
    )
    _check_fit(model, truth, result, 0.6)


# --- simulation, evaluation helpers -----------------------------------------------------------


def test_sample_and_evaluation_helpers():
    model = SMALL["sparse_gamma_def"]  # its simulator is compiled already (module level)
    counts, truth = model.sample(jax.random.key(10))
    assert counts.shape == (4, 5) and counts.dtype == jnp.float32
    assert np.all(np.asarray(counts) >= 0) and np.all(np.asarray(counts) == np.round(counts))
    assert {n: v.shape for n, v in truth.items()} == model.latent_shapes
    assert all(np.all(np.asarray(v) > 0) for v in truth.values())
    assert not np.array_equal(counts, model.sample(jax.random.key(11))[0])
    more, truth = model.sample(jax.random.key(1), num_observations=9)
    assert more.shape == (9, 5) and truth["z1"].shape == (9, 3) and truth["W0"].shape == (3, 5)
    # Held-out data: a model with other rows, the same weights.
    test_model = model.with_data(more)
    assert test_model.hyperparameters == model.hyperparameters
    # The factors take the latents in log space (model.log_space); the value-space functions convert.
    assert test_model.log_space
    values = jax.jit(test_model.joint.factor_values_fn)(jax.tree.map(jnp.log, truth), test_model.data)
    assert all(np.all(np.isfinite(v)) for v in values.values())
    per_entry = test_model.observation_loglik(truth, model.prepare_data(more))
    assert per_entry.shape == (9, 5)
    np.testing.assert_allclose(per_entry, values["likelihood"], rtol=1e-4, atol=1e-4)  # float32 cancellations
    np.testing.assert_allclose(test_model.mean_observation(truth), truth["z1"] @ truth["W0"], rtol=1e-6)

    mf = SMALL["beta_gamma_mf"]
    binary, truth = mf.sample(jax.random.key(2))
    assert set(np.unique(np.asarray(binary))) <= {0.0, 1.0}
    probability = np.asarray(mf.mean_observation(truth))
    assert probability.shape == (4, 5) and np.all((probability >= 0) & (probability <= 1))
    assert np.all(np.asarray(truth["z"]) > 0) and np.all(np.asarray(truth["z"]) < 1)
    assert mf.local_latent_names == ("z",) and mf.global_latent_names == ("w",)
    assert isinstance(mf.latents()["z"], Beta) and isinstance(mf.latents()["w"], Gamma)


# --- data validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, message",
    [
        (np.ones(5), r"data: expected a 2-D array .* found 1 dimension"),
        (np.ones((2, 3, 4)), r"found 3 dimension"),
        (np.zeros((0, 3)), r"at least one row"),
        (np.array([[1.0, np.nan]]), r"data: expected finite values; found 1 NaN or infinite"),
        (np.array([[1.0, np.inf]]), r"expected finite values"),
        (
            np.array([[1.0, -2.0, -1.0, -1.0]]),
            r"data: Poisson counts must be non-negative integers; found 3 negative value\(s\) \(min -2.0",
        ),
        (np.array([[1.5, 2.0]]), r"non-negative integers; found 1 non-integer value\(s\) \(the first 1.5"),
        (np.array([["a", "b"]]), r"expected a numeric 2-D array, found dtype <U1"),
        (np.array([[2.0**25]]), r"at most 2\*\*24"),
    ],
)
def test_poisson_data_validation(data, message):
    with pytest.raises(DataError, match=message):
        sparse_gamma_def(data, layer_sizes=(2,))


@pytest.mark.parametrize(
    "data, message",
    [
        (
            np.array([[0.0, 1.0, 2.0]]),
            r"data: Bernoulli observations must be 0 or 1; found 1 other value\(s\) \(the first 2.0",
        ),
        (np.array([[0.5, 1.0]]), r"must be 0 or 1"),
        (np.array([[-1, 1]]), r"must be 0 or 1"),
        (np.array([[0.0, np.nan]]), r"expected finite values"),
        (np.array([0.0, 1.0]), r"2-D array"),
    ],
)
def test_bernoulli_data_validation(data, message):
    with pytest.raises(DataError, match=message):
        beta_gamma_mf(data, num_factors=2)


def test_valid_data_is_stored_as_float32():
    model = sparse_gamma_def(np.array([[0, 3], [255, 1]], dtype=np.uint8), layer_sizes=(2,))
    assert model.observations.dtype == jnp.float32 and float(model.observations[1, 0]) == 255.0
    assert model.data["log_factorial"].dtype == jnp.float32
    mf = beta_gamma_mf(np.array([[True, False]]), num_factors=1)
    assert mf.observations.dtype == jnp.float32
    with pytest.raises(DataError, match=r"^x: Poisson counts"):
        model.prepare_data(np.array([[-1.0, 0.0], [0.0, 0.0]]))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda d: sparse_gamma_def(d, layer_sizes=()), "layer_sizes"),
        (lambda d: sparse_gamma_def(d, layer_sizes=(3, 0)), "layer_sizes"),
        (lambda d: sparse_gamma_def(d, alpha_z=0.0), "alpha_z"),
        (lambda d: sparse_gamma_def(d, weight_rate=-1.0), "weight_rate"),
        (lambda d: beta_gamma_mf(d, num_factors=0), "num_factors"),
        (lambda d: beta_gamma_mf(d, num_factors=2.5), "num_factors"),
        (lambda d: beta_gamma_mf(d, weight_shape=float("nan")), "weight_shape"),
    ],
)
def test_hyperparameter_validation(build, message):
    with pytest.raises(ConfigError, match=message):
        build(np.ones((2, 3)))


def test_docstring_examples():
    import doctest
    import sys

    for module in ("grepvi.models.factors", "grepvi.models.sparse_gamma_def", "grepvi.models.beta_gamma_mf"):
        result = doctest.testmod(sys.modules[module])
        assert result.attempted > 0 and result.failed == 0, module


# --- Olivetti size ----------------------------------------------------------------------------


@pytest.mark.slow
def test_olivetti_size_grep_step_compiles_and_runs():
    """N = 320, D = 4096, layers 100/40/15 (463,800 gamma latents): two jitted G-REP steps."""
    from grepvi.inference.state import init, step

    rng = np.random.default_rng(0)
    counts = rng.poisson(rng.gamma(1.0, 50.0, size=(320, 1)), size=(320, 4096))
    model = sparse_gamma_def(counts)
    target = model.target()
    estimator = get_estimator("grep")
    optimizer = grepvi.advi_stepsize(5.0)
    state = init(jax.random.key(0), target, optimizer)
    run = jax.jit(lambda s, data: step(s, target, estimator, optimizer, data))
    new_state, info = run(state, model.data)
    new_state, info = run(new_state, model.data)
    assert np.isfinite(float(info.elbo)) and bool(info.finite)
    assert not np.allclose(new_state.params["W0"]["mean"], state.params["W0"]["mean"])


def test_the_models_start_concentration_is_jaxs_float32_softplus():
    """Computed in NumPy at import (JAX's softplus compiled a program there), the same float."""
    from grepvi.models.sparse_gamma_def import INIT_CONCENTRATION

    assert INIT_CONCENTRATION == float(jax.nn.softplus(jnp.float32(0.5)))

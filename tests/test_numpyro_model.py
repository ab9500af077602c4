"""NumPyro models in (grepvi.interop.numpyro_model), ArviZ out (grepvi.interop.arviz_io): optional extras.

Skipped when NumPyro (or ArviZ, for its tests) is not installed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
dist = pytest.importorskip("numpyro.distributions")

import grepvi  # noqa: E402
from grepvi.errors import ModelError  # noqa: E402
from grepvi.interop.numpyro_examples import beta_gamma_mf_model, sparse_gamma_def_model  # noqa: E402
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402
from grepvi.models import beta_gamma_mf, sparse_gamma_def  # noqa: E402


def _point(model, seed=0):
    families = model.latents()
    keys = jax.random.split(jax.random.key(seed), len(families))
    point = {}
    for key, (name, family) in zip(keys, sorted(families.items()), strict=True):
        params = family.init_params(key)
        point[name] = family.sample(params, key)  # a random point of q: spread-out values
        if isinstance(family, grepvi.Gamma):
            point[name] = jnp.clip(point[name], 1e-3, 1e3)
        else:
            point[name] = jnp.clip(point[name], 1e-3, 1 - 1e-3)
    return point


@pytest.mark.parametrize("name", [pytest.param("sparse_gamma_def", marks=pytest.mark.slow), "beta_gamma_mf"])
def test_the_paper_models_in_numpyro_have_grepvis_local_log_joints(name):
    """The same model written in NumPyro: the same blankets (read off its plates) and the same
    local log joint for every element of every latent, and the same log joint."""
    rng = np.random.default_rng(0)
    if name == "sparse_gamma_def":
        x = rng.poisson(2.0, (7, 6)).astype(np.float32)
        ours, theirs = (
            sparse_gamma_def(x, layer_sizes=(4, 3)),
            from_numpyro(sparse_gamma_def_model, x, (4, 3)),
        )
    else:
        x = (rng.random((7, 6)) < 0.3).astype(np.float32)
        ours, theirs = beta_gamma_mf(x, num_factors=3), from_numpyro(beta_gamma_mf_model, x, 3)
    assert {n: f.shape for n, f in theirs.families.items()} == ours.latent_shapes
    assert {n: type(f) for n, f in theirs.families.items()} == {n: type(f) for n, f in ours.latents().items()}
    for latent, blanket in ours.joint.blankets.items():  # factor names differ: compare by latents read
        read = {frozenset(ours.joint.dependencies[f]) for f in blanket}
        # The NumPyro MF also has z's uniform prior as a site (log 1 = 0; grepvi's has no factor).
        assert read <= {frozenset(theirs.joint.dependencies[f]) for f in theirs.joint.blankets[latent]}
        assert len(theirs.joint.blankets[latent]) <= len(blanket) + 1
    point = _point(ours)
    local_ours = jax.jit(ours.local_logdensity_fn)(point, ours.data)
    local_theirs = jax.jit(theirs.local_logdensity_fn)(point, theirs.data)
    for latent, value in local_ours.items():
        np.testing.assert_allclose(local_theirs[latent], value, rtol=1e-5, atol=1e-3, err_msg=latent)
    np.testing.assert_allclose(
        jax.jit(theirs.logdensity_fn)(point, theirs.data),
        jax.jit(ours.logdensity_fn)(point, ours.data),
        rtol=1e-5,
    )


def test_defaults_fit_a_numpyro_model_to_its_exact_posterior():
    """Gamma-Poisson with a plate of observations: the posterior is Gamma(2 + sum x, 1 + N)."""
    model, counts = _gamma_poisson()
    adapted = from_numpyro(model, counts)
    assert adapted.joint.blankets == {"rate": ("rate", "x")}
    result = adapted.fit(progress=False)
    assert result.converged
    posterior = result.posterior["rate"]
    shape, rate = 2.0 + 19.0, 1.0 + 5.0
    assert float(posterior.mean()) == pytest.approx(shape / rate, rel=0.02)
    assert float(posterior.variance()) == pytest.approx(shape / rate**2, rel=0.05)


def _censored_exponential(with_plate_factor: bool):
    """Exponential survival times censored at 3: the censored ones enter through
    ``numpyro.factor`` (``log S(t) = -rate t``), in a plate or as one sum. With a Gamma(1, 1)
    prior the posterior is Gamma(1 + uncensored, 1 + sum t)."""
    t = np.array([0.4, 2.1, 3.0, 0.9, 3.0, 1.7, 0.2, 3.0, 1.1, 0.6], np.float32)
    censored = t >= 3.0

    def model(t, censored):
        rate = numpyro.sample("rate", dist.Gamma(1.0, 1.0))
        numpyro.deterministic("mean_time", 1.0 / rate)
        with numpyro.plate("obs", t.shape[0]):
            with numpyro.handlers.mask(mask=~censored):
                numpyro.sample("t", dist.Exponential(rate), obs=t)
            if with_plate_factor:
                numpyro.factor("survival", jnp.where(censored, -rate * t, 0.0))
        if not with_plate_factor:
            numpyro.factor("survival", jnp.sum(jnp.where(censored, -rate * t, 0.0)))

    return model, (t, censored), (1.0 + float((~censored).sum()), 1.0 + float(t.sum()))


@pytest.mark.parametrize("with_plate_factor", [True, False], ids=["plate-factor", "global-factor"])
def test_factor_sites_count_in_the_log_density_and_the_fit(with_plate_factor):
    """``numpyro.factor`` is an observed site marked auxiliary; the adapter once dropped every
    auxiliary site, so a censored-survival model fitted the uncensored times alone (posterior
    mean 0.81 against the exact 0.56: 3 posterior sd off). Its log density is NumPyro's, its
    blanket holds the factor, and the default fit lands on the exact posterior."""
    from numpyro.infer.util import log_density

    model, args, (shape, rate) = _censored_exponential(with_plate_factor)
    adapted = from_numpyro(model, *args)
    assert "survival" in adapted.joint.blankets["rate"]
    for value in (0.2, 0.5, 1.3):
        theirs = log_density(model, args, {}, {"rate": jnp.float32(value)})[0]
        ours = adapted.logdensity_fn({"rate": jnp.float32(value)}, adapted.data)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
        np.testing.assert_allclose(ours, (shape - 1.0) * np.log(value) - rate * value, rtol=1e-5)
    result = adapted.fit(progress=False)
    assert result.converged
    posterior = result.posterior["rate"]
    assert float(posterior.mean()) == pytest.approx(shape / rate, rel=0.02)
    assert float(posterior.variance()) == pytest.approx(shape / rate**2, rel=0.05)


def test_obs_mask_imputation_is_refused_with_the_way_on():
    """``obs_mask`` makes a latent of the full shape whose observed entries have no density:
    the fit used to stall on non-finite gradients naming no latent. Now the adapter names the
    site and the rewrite (a latent of the missing entries alone), which fits."""
    y = np.array([0.3, 1.2, -0.4, 2.0, 0.8, 1.5], np.float32)
    mask = np.array([True, True, False, True, True, False])

    def imputed(y, mask):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("obs", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y, obs_mask=mask)

    with pytest.raises(ModelError, match=r"site 'y_unobserved'.*obs_mask.*y_missing"):
        from_numpyro(imputed, y, mask)

    def rewritten(y_observed, num_missing):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("obs", y_observed.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y_observed)
        with numpyro.plate("missing", num_missing):
            numpyro.sample("y_missing", dist.Normal(mu, 1.0))

    adapted = from_numpyro(rewritten, y[mask], int((~mask).sum()))
    assert set(adapted.families) == {"mu", "y_missing"}


@pytest.mark.slow  # 16 s; a default fit's accuracy: test_defaults_fit_a_numpyro_model_to_its_exact_posterior
def test_a_model_without_arguments_fits_its_prior():
    """A NumPyro model with no data (no argument at all): the posterior is the prior, Gamma(2, 1)
    and Beta(2, 3); ``fit`` used to refuse the empty data pytree ``()``."""

    def model():
        numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        numpyro.sample("p", dist.Beta(2.0, 3.0))

    result = from_numpyro(model).fit(progress=False)
    assert result.converged
    rate, p = result.posterior["rate"], result.posterior["p"]
    assert float(rate.mean()) == pytest.approx(2.0, rel=0.02)
    assert float(rate.variance()) == pytest.approx(2.0, rel=0.05)
    assert float(p.mean()) == pytest.approx(0.4, rel=0.02)
    assert float(p.variance()) == pytest.approx(0.04, rel=0.05)


def test_families_by_support_and_by_request():
    def model():
        numpyro.sample("positive", dist.Exponential(1.0))
        numpyro.sample("unit", dist.Beta(2.0, 2.0))
        numpyro.sample("simplex", dist.Dirichlet(jnp.ones(3)))
        with numpyro.plate("i", 4):
            numpyro.sample("real", dist.Normal(0.0, 1.0))

    adapted = from_numpyro(model)
    kinds = {name: type(family).__name__ for name, family in adapted.families.items()}
    assert kinds == {"positive": "Gamma", "unit": "Beta", "simplex": "Dirichlet", "real": "Normal"}
    assert adapted.families["real"].shape == (4,) and adapted.sites["real"].axes == ("i",)
    assert adapted.joint.local_axes["simplex"] == ()  # one Dirichlet element: the event axis
    chosen = from_numpyro(model, families={"positive": "lognormal"})
    assert type(chosen.families["positive"]).__name__ == "LogNormal"


def test_what_the_adapter_cannot_handle_is_named():
    def discrete():
        numpyro.sample("count", dist.Poisson(3.0))

    with pytest.raises(ModelError, match="site 'count': a discrete latent site"):
        from_numpyro(discrete)

    def bounded():
        numpyro.sample("u", dist.Uniform(-1.0, 2.0))

    def sphere():
        numpyro.sample("u", dist.ProjectedNormal(jnp.ones(3)))

    with pytest.raises(ModelError, match="site 'u': no variational family for the support"):
        from_numpyro(sphere)

    calls = []

    def changing():
        calls.append(1)
        numpyro.sample("a", dist.Gamma(1.0, 1.0))
        if len(calls) > 1:
            numpyro.sample("extra", dist.Gamma(1.0, 1.0))

    with pytest.raises(ModelError, match="site 'extra' appears in one trace"):
        from_numpyro(changing)
    with pytest.raises(ModelError, match="families: \\['nope'\\]"):
        from_numpyro(bounded, families={"nope": "gamma"})


def test_the_data_are_an_argument_of_the_programs():
    """The model's arrays are its data: another data set of the same shape, same functions."""
    x = np.random.default_rng(1).poisson(2.0, (5, 4)).astype(np.float32)
    adapted = from_numpyro(sparse_gamma_def_model, x, (2,))
    point = _point(sparse_gamma_def(x, layer_sizes=(2,)))
    other = (x + 1.0,)
    value = jax.jit(adapted.logdensity_fn)(point, other)
    assert float(value) == pytest.approx(
        float(
            sparse_gamma_def(x + 1.0, layer_sizes=(2,)).logdensity_fn(
                point, sparse_gamma_def(x + 1.0, layer_sizes=(2,)).data
            )
        ),
        rel=1e-5,
    )


def test_the_first_trace_reads_jax_arrays_as_numpy_and_the_fit_is_the_same():
    """NumPyro checks a distribution's arguments on concrete data in the model's first trace;
    on JAX arrays each check compiled a program of its own in a fresh process. The trace reads
    them as NumPy arrays; the data of the fit, and the fit, are as given."""
    from grepvi.interop import numpyro_model

    seen = []

    def model(counts, sizes):
        seen.append((type(counts), type(sizes)))
        p = numpyro.sample("p", dist.Beta(1.0, 1.0))
        with numpyro.plate("rows", counts.shape[0]):
            numpyro.sample("y", dist.Binomial(sizes, probs=p), obs=counts)

    counts, sizes = np.array([3, 5, 2, 7], np.int32), np.array([10, 12, 9, 14], np.int32)
    trace = numpyro_model._user_trace(model, (jnp.asarray(counts), jnp.asarray(sizes)), {})
    assert seen[0] == (np.ndarray, np.ndarray)
    assert tuple(trace["y"]["fn"].total_count.shape) == (4,)
    fits = [
        from_numpyro(model, *data).fit(progress=False)
        for data in ((counts, sizes), (jnp.asarray(counts), jnp.asarray(sizes)))
    ]
    for found, expected in zip(
        jax.tree_util.tree_leaves(fits[1].params), jax.tree_util.tree_leaves(fits[0].params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(found), np.asarray(expected))
    tracer_kept = []
    jax.jit(lambda x: tracer_kept.append(numpyro_model._on_host(x)) or x)(jnp.ones(3))
    assert isinstance(tracer_kept[0], jax.core.Tracer)


# --- ArviZ ---------------------------------------------------------------------------------------


def test_a_fit_converts_to_inference_data_that_arviz_summarizes_and_plots():
    az = pytest.importorskip("arviz")
    import matplotlib

    matplotlib.use("Agg")
    from grepvi.interop.arviz_io import to_inference_data

    x = np.random.default_rng(2).poisson(2.0, (6, 4)).astype(np.float32)
    model = sparse_gamma_def(x, layer_sizes=(2,))
    result = grepvi.fit(
        model.logdensity_fn,
        model.latents(),
        data=model.data,
        local_logdensity_fn=model.local_logdensity_fn,
        num_steps=20,
        step_size=0.1,
        progress=False,
    )
    data = to_inference_data(result, num_draws=200, latent_axes=model.latent_axes, observed={"x": x})
    assert set(data.groups()) >= {"posterior", "sample_stats", "observed_data"}
    assert data.posterior["z1"].dims == ("chain", "draw", "n", "k1")
    assert data.posterior["W0"].dims == ("chain", "draw", "k1", "d")
    assert data.posterior.sizes["draw"] == 200 and data.posterior.sizes["chain"] == 1
    draws = data.posterior["W0"].values[0]
    mean = np.asarray(result.posterior["W0"].mean())
    std = np.sqrt(np.asarray(result.posterior["W0"].variance()))
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * std / np.sqrt(200) + 1e-6)  # draws from q
    np.testing.assert_array_equal(data.sample_stats["elbo"].values[0], result.trace.elbo)
    summary = az.summary(data, var_names=["W0"], kind="stats")
    assert len(summary) == 2 * 4
    import warnings

    with warnings.catch_warnings():  # ArviZ 0.23 calls a matplotlib API deprecated in 3.11
        warnings.simplefilter("ignore", DeprecationWarning)
        axes = az.plot_posterior(data, var_names=["W0"], coords={"k1": [0], "d": [0, 1]})
    assert np.size(axes) == 2
    import matplotlib.pyplot as plt

    plt.close("all")


def test_pareto_k_from_arviz_agrees_with_grepvis_own():
    pytest.importorskip("arviz")

    def logdensity_fn(z):
        return -0.5 * jnp.sum(z["x"] ** 2)

    narrow = grepvi.Normal(shape=(5,), init_scale=0.3)
    params = {"x": narrow.init_params()}
    ours = grepvi.pareto_k(logdensity_fn, {"x": narrow}, params, jax.random.key(0), method="grepvi")
    theirs = grepvi.pareto_k(logdensity_fn, {"x": narrow}, params, jax.random.key(0), method="arviz")
    assert not theirs.reliable and not ours.reliable
    assert theirs.k == pytest.approx(ours.k, abs=0.05)


# --- inside NumPyro's SVI ------------------------------------------------------------------------


def _gamma_poisson():
    counts = jnp.array([3.0, 5.0, 4.0, 0.0, 7.0])

    def model(counts):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        with numpyro.plate("n", counts.shape[0]):
            numpyro.sample("x", dist.Poisson(rate), obs=counts)

    return model, counts


def test_grep_elbo_gradient_is_grepvis_g_rep():
    """SVI differentiates GrepELBO's loss: its gradient is minus grepvi's G-REP estimate from the
    same standardized draw (baseline included, the analytic entropy's gradient), and its value is
    minus the ELBO estimate."""
    from numpyro.infer import SVI

    from grepvi.interop.numpyro_svi import GrepELBO, GrepGuide
    from grepvi.target import bind_data

    model, counts = _gamma_poisson()
    guide = GrepGuide(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), GrepELBO())
    state = svi.init(jax.random.key(0), counts)
    param_map = svi.get_params(state)
    key = jax.random.key(5)
    # both compiled (eagerly, each primitive compiles on its own: 26 s)
    loss, grad_map = jax.jit(jax.value_and_grad(lambda p: GrepELBO().loss(key, p, model, guide, counts)))(
        param_map
    )
    target = bind_data(guide.adapted.target(), (counts,))
    plain_entropy = grepvi.get_estimator("grep", sticking_the_landing=False)
    estimate, info = jax.jit(lambda k, p: plain_entropy.estimate(k, p, target))(
        jax.random.split(key, 1)[0], guide.params(param_map)
    )
    for name, value in estimate["rate"].items():
        np.testing.assert_allclose(-grad_map[f"rate__{name}"], value, rtol=1e-5)
    assert float(loss) == pytest.approx(-float(info.elbo), rel=1e-5)


def test_two_changed_lines_fit_with_numpyro_svi():
    from numpyro.infer import SVI, Predictive

    from grepvi.interop.numpyro_svi import GrepELBO, GrepGuide

    model, counts = _gamma_poisson()
    guide = GrepGuide(model)  # instead of AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.05), GrepELBO())  # instead of Trace_ELBO()
    result = svi.run(jax.random.key(0), 2000, counts, progress_bar=False)
    draws = Predictive(guide, params=result.params, num_samples=2000)(jax.random.key(1), counts)["rate"]
    assert float(jnp.mean(draws)) == pytest.approx(21.0 / 6.0, rel=0.1)

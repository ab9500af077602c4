"""Discrete latent sites summed out by enumeration (grepvi.interop.enumeration).

The marginal log density is checked against the same model marginalized by hand (exact, at
random latents), and a default fit of a mixture written with ``z ~ Categorical(w)`` against
the default fit of the same mixture written with ``MixtureSameFamily``: one target, so one
answer up to the fits' Monte Carlo error.
"""

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
pytest.importorskip("funsor")
import numpyro.distributions as dist  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

from grepvi.errors import ModelError  # noqa: E402
from grepvi.interop.enumeration import ENUMERATED_FACTOR, max_plate_nesting  # noqa: E402
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

RNG = np.random.default_rng(20261207)
X = jnp.asarray(np.concatenate([RNG.normal(-3, 0.7, 60), RNG.normal(0.5, 0.7, 50), RNG.normal(3, 0.7, 40)]))
LOCS = jnp.array([-2.0, 0.0, 2.0])


def mixture_with_assignments(x):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(LOCS, 2.0).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("x", dist.Normal(mu[z], sigma), obs=x)


def mixture_by_hand(x):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(LOCS, 2.0).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.MixtureSameFamily(dist.Categorical(w), dist.Normal(mu, sigma)), obs=x)


COUNTS = jnp.asarray(np.concatenate([RNG.poisson(3.0, 25), RNG.poisson(1.0, 15)]), jnp.float32)


def change_point(counts):
    """The switch as an index into the two rates (benchmarks/discrete_models.py's by ``where``)."""
    rates = numpyro.sample("rates", dist.Exponential(jnp.ones(2)).to_event(1))
    tau = numpyro.sample("tau", dist.DiscreteUniform(0, counts.shape[0] - 1))
    after = (jnp.arange(counts.shape[0]) >= tau).astype(jnp.int32)
    with numpyro.plate("t", counts.shape[0]):
        numpyro.sample("counts", dist.Poisson(rates[after]), obs=counts)


def change_point_by_hand(latents, counts):
    T = counts.shape[0]
    early, late = latents["rates"]
    rates = jnp.where(jnp.arange(T)[None, :] < jnp.arange(T)[:, None], early, late)  # (tau, t)
    per_tau = jnp.sum(dist.Poisson(rates).log_prob(counts), axis=1) - jnp.log(T)
    return logsumexp(per_tau) + jnp.sum(dist.Exponential(1.0).log_prob(latents["rates"]))


Y = jnp.array([2.1, 3.4, 2.7, 3.9, 2.2])


def switch_on_the_prior(y):
    """A continuous latent whose own density reads the discrete one."""
    on = numpyro.sample("on", dist.Bernoulli(0.3))
    theta = numpyro.sample("theta", dist.Normal(3.0 * on, 1.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta, 1.0), obs=y)


def switch_by_hand(latents, y):
    theta = latents["theta"]
    joint = jnp.stack(
        [
            jnp.log(0.7) + dist.Normal(0.0, 1.0).log_prob(theta),
            jnp.log(0.3) + dist.Normal(3.0, 1.0).log_prob(theta),
        ]
    )
    return logsumexp(joint) + jnp.sum(dist.Normal(theta, 1.0).log_prob(y))


ZIP_Y = jnp.asarray(np.where(RNG.random(200) < 0.3, 0, RNG.poisson(2.5, 200)), jnp.float32)


def zero_inflation_indicator(y):
    """A zero-inflated Poisson as written with its indicator: the rate times ``1 - z``. NumPyro's
    NUTS cannot start on it (the rate's gradient is ``0 * inf`` where ``z = 1`` and ``y > 0``:
    "Cannot find valid initial parameters", seventy-fourth session)."""
    pi = numpyro.sample("pi", dist.Beta(1.0, 1.0))
    lam = numpyro.sample("lam", dist.Gamma(2.0, 0.5))
    with numpyro.plate("n", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(pi))
        numpyro.sample("y", dist.Poisson(lam * (1 - z)), obs=y)


def zero_inflated_by_hand(y):
    pi = numpyro.sample("pi", dist.Beta(1.0, 1.0))
    lam = numpyro.sample("lam", dist.Gamma(2.0, 0.5))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.ZeroInflatedPoisson(pi, lam), obs=y)


def _latents(model, *args, seed=0):
    """Prior draws of the model's continuous latents (the marginal's arguments)."""
    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, seed)).get_trace(*args)
    return {
        name: site["value"]
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and not site["fn"].support.is_discrete
    }


def test_a_mixtures_assignments_summed_out_give_the_mixture_density():
    enumerated, by_hand = from_numpyro(mixture_with_assignments, X), from_numpyro(mixture_by_hand, X)
    assert enumerated.enumerated == ("z",) and "z" not in enumerated.families
    assert set(enumerated.families) == {"w", "mu", "sigma"}
    assert ENUMERATED_FACTOR in enumerated.sites and enumerated.sites[ENUMERATED_FACTOR].observed
    value_and_grad = jax.jit(jax.value_and_grad(enumerated.logdensity_fn))  # one program, not op by op
    expected_value_and_grad = jax.jit(jax.value_and_grad(by_hand.logdensity_fn))
    for seed in range(5):
        latents = _latents(mixture_by_hand, X, seed=seed)
        value, gradient = value_and_grad(latents, enumerated.data)
        expected, expected_gradient = expected_value_and_grad(latents, by_hand.data)
        np.testing.assert_allclose(value, expected, rtol=2e-6, atol=1e-4)
        for name in latents:
            # the simplex's: along its tangent (Categorical(w) reads log w, the mixture its
            # normalized log w: they differ by a constant vector, the same on the simplex)
            tangent = (lambda g: g - jnp.mean(g)) if name == "w" else (lambda g: g)
            np.testing.assert_allclose(
                tangent(gradient[name]), tangent(expected_gradient[name]), rtol=1e-4, atol=1e-3
            )


def test_a_change_point_summed_over_its_positions():
    adapted = from_numpyro(change_point, COUNTS)
    assert adapted.enumerated == ("tau",)
    density = jax.jit(adapted.logdensity_fn)
    for seed in range(5):
        latents = _latents(change_point, COUNTS, seed=seed)
        value = density(latents, adapted.data)
        np.testing.assert_allclose(value, change_point_by_hand(latents, COUNTS), rtol=2e-6, atol=1e-4)


def test_a_continuous_latent_whose_prior_reads_the_discrete_one():
    adapted = from_numpyro(switch_on_the_prior, Y)
    for theta in (-1.0, 0.5, 2.0, 4.5):
        latents = {"theta": jnp.asarray(theta)}
        np.testing.assert_allclose(
            adapted.logdensity_fn(latents, adapted.data), switch_by_hand(latents, Y), rtol=1e-6, atol=1e-5
        )


@pytest.fixture(scope="module")
def mixture_fits():
    """The adapted mixture with assignments, its default fit, and the hand-marginalized one's."""
    adapted = from_numpyro(mixture_with_assignments, X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return adapted, adapted.fit(progress=False), from_numpyro(mixture_by_hand, X).fit(progress=False)


# The two fits (18 s) in the slow tier: the fast tier's default fit of an enumerated mixture is
# docs/numpyro.md's (tests/test_numpyro_docs.py: its assignments' draws checked there too)
@pytest.mark.slow
def test_the_default_fit_of_a_mixture_with_assignments_is_the_mixtures(mixture_fits):
    _, enumerated, by_hand = mixture_fits
    assert enumerated.converged and by_hand.converged
    for name in ("w", "mu", "sigma"):
        mean, sd = np.asarray(by_hand.posterior[name].mean()), np.asarray(by_hand.posterior[name].std())
        other = np.asarray(enumerated.posterior[name].mean())
        # two converged fits of one target: each within ~0.005 sd of the optimum
        assert np.max(np.abs(other - mean) / sd) < 0.05, name
    # the clusters, not two components on one of them
    mu = np.sort(np.asarray(enumerated.posterior["mu"].mean()))
    np.testing.assert_allclose(mu, [-3.0, 0.5, 3.0], atol=0.35)


@pytest.mark.slow
def test_the_assignments_are_drawn_from_their_conditional(mixture_fits):
    """``deterministic`` draws each row's assignment from ``p(z | x, theta)`` at each draw of
    ``q``: its frequencies against the exact conditional probabilities averaged over the same
    draws of ``q``, within 4.5 binomial standard errors at each of the 450 (row, component)."""
    from grepvi.interop.arviz_io import posterior_draws

    adapted, result, _ = mixture_fits
    num_draws = 400
    z = adapted.deterministic(result, num_draws=num_draws, seed=3)["z"]
    assert z.shape == (num_draws, X.shape[0]) and set(np.unique(z)) <= {0, 1, 2}
    draws = posterior_draws(result, num_draws, 3)
    joint = jnp.log(draws["w"])[:, None, :] + dist.Normal(
        draws["mu"][:, None, :], draws["sigma"][:, None, None]
    ).log_prob(X[None, :, None])
    expected = np.mean(np.exp(joint - logsumexp(joint, axis=-1, keepdims=True)), axis=0)  # (rows, 3)
    frequency = np.stack([np.mean(z == k, axis=0) for k in range(3)], axis=-1)
    se = np.sqrt(np.maximum(expected * (1 - expected), 1.0 / num_draws) / num_draws)
    assert np.max(np.abs(frequency - expected) / se) < 4.5
    pytest.importorskip("arviz")
    from grepvi.interop.arviz_io import to_inference_data

    posterior = to_inference_data(result, num_draws, seed=3, deterministic=adapted).posterior
    assert posterior["z"].shape == (1, num_draws, X.shape[0])
    np.testing.assert_array_equal(np.asarray(posterior["z"])[0], z)  # the same draws
    # the rows of the middle cluster mostly drawn to the middle component
    middle = int(np.argsort(np.asarray(result.posterior["mu"].mean()))[1])
    assert np.mean(frequency[60:110, middle]) > 0.8


def test_a_zero_inflation_indicator_summed_out_is_the_zero_inflated_poisson():
    enumerated, by_hand = (
        from_numpyro(zero_inflation_indicator, ZIP_Y),
        from_numpyro(zero_inflated_by_hand, ZIP_Y),
    )
    value, expected = jax.jit(enumerated.logdensity_fn), jax.jit(by_hand.logdensity_fn)
    for seed in range(4):
        latents = _latents(zero_inflated_by_hand, ZIP_Y, seed=seed)
        np.testing.assert_allclose(
            value(latents, enumerated.data), expected(latents, by_hand.data), rtol=2e-6
        )


@pytest.mark.slow
def test_the_default_fit_of_a_zero_inflation_indicator_is_the_zero_inflated_poissons():
    """The summed indicator's rate gradient is ``0 * inf`` in float32 autodiff; the fit's
    widened gradient (``grepvi.inference.widened_gradient``: a float64 pass that takes a product
    with an exact zero factor as 0) gives the hand-written model's answer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enumerated = from_numpyro(zero_inflation_indicator, ZIP_Y).fit(progress=False)
        by_hand = from_numpyro(zero_inflated_by_hand, ZIP_Y).fit(progress=False)
    assert enumerated.converged and by_hand.converged
    for name in ("pi", "lam"):
        mean, sd = float(by_hand.posterior[name].mean()), float(by_hand.posterior[name].std())
        assert abs(float(enumerated.posterior[name].mean()) - mean) / sd < 0.05, name


def test_max_plate_nesting_reads_the_deepest_plate():
    trace = numpyro.handlers.trace(numpyro.handlers.seed(mixture_with_assignments, 0)).get_trace(X)
    assert max_plate_nesting(trace) == 1

    def nested():
        with numpyro.plate("a", 2, dim=-3):
            numpyro.sample("u", dist.Normal(0.0, 1.0))

    assert max_plate_nesting(numpyro.handlers.trace(numpyro.handlers.seed(nested, 0)).get_trace()) == 3


def test_what_enumeration_cannot_sum_is_named():
    def poisson_latent():
        numpyro.sample("count", dist.Poisson(3.0))
        numpyro.sample("u", dist.Normal(0.0, 1.0))

    with pytest.raises(ModelError, match=r"site 'count': a discrete latent site \(Poisson\) whose support"):
        from_numpyro(poisson_latent)

    def sequential(y):
        on = numpyro.sample("on", dist.Bernoulli(0.5), infer={"enumerate": "sequential"})
        numpyro.sample("y", dist.Normal(on + numpyro.sample("m", dist.Normal(0.0, 1.0)), 1.0), obs=y)

    with pytest.raises(ModelError, match=r"site 'on': infer=\{'enumerate': 'sequential'\}"):
        from_numpyro(sequential, Y)

    with pytest.raises(ModelError, match=r"families\['z'\]: site 'z' is a discrete latent site"):
        from_numpyro(mixture_with_assignments, X, families={"z": "normal"})

    def only_discrete():
        with numpyro.plate("i", 3):
            numpyro.sample("c", dist.Categorical(jnp.ones(3) / 3))

    with pytest.raises(ModelError, match="no continuous latent site"):
        from_numpyro(only_discrete)

    def subsampled(x):
        w = numpyro.sample("w", dist.Dirichlet(jnp.ones(2)))
        with numpyro.plate("data", x.shape[0], subsample_size=10) as rows:
            z = numpyro.sample("z", dist.Categorical(w))
            numpyro.sample("x", dist.Normal(jnp.array([-1.0, 1.0])[z], 1.0), obs=x[rows])

    with pytest.raises(ModelError, match=r"site 'z': .* plate 'data' subsamples its rows"):
        from_numpyro(subsampled, X)


def test_without_funsor_the_site_and_the_package_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpyro.contrib.funsor", None)
    with pytest.raises(ModelError, match=r"site 'z': .*needs the funsor package"):
        from_numpyro(mixture_with_assignments, X)


HMM_COUNTS = jnp.asarray(RNG.poisson(np.repeat([1.0, 6.0, 1.0, 6.0], [12, 8, 10, 10])), jnp.float32)
STICKY = jnp.array([[8.0, 2.0], [2.0, 8.0]])


def poisson_hidden_markov(counts):
    """Two hidden states of Poisson counts, the chain through ``numpyro.contrib.control_flow.scan``
    carrying the state (benchmarks/discrete_models.py has a Gaussian one)."""
    from numpyro.contrib.control_flow import scan

    trans = numpyro.sample("trans", dist.Dirichlet(STICKY).to_event(1))
    rates = numpyro.sample("rates", dist.Gamma(2.0, 0.5).expand([2]).to_event(1))

    def advance(carry, count):
        hidden = numpyro.sample("hidden", dist.Categorical(trans[carry]))
        numpyro.sample("count", dist.Poisson(rates[hidden]), obs=count)
        return hidden, None

    scan(advance, 0, counts)


def forward_algorithm(latents, counts):
    emission = dist.Poisson(latents["rates"])
    log_trans = jnp.log(latents["trans"])
    first = log_trans[0] + emission.log_prob(counts[0])

    def advance(alpha, count):
        return logsumexp(alpha[:, None] + log_trans, axis=0) + emission.log_prob(count), None

    alpha, _ = jax.lax.scan(advance, first, counts[1:])
    prior = dist.Dirichlet(STICKY).to_event(1).log_prob(latents["trans"])
    return logsumexp(alpha) + prior + jnp.sum(dist.Gamma(2.0, 0.5).log_prob(latents["rates"]))


def test_a_hidden_markov_chain_in_a_scan_is_the_forward_algorithm():
    adapted = from_numpyro(poisson_hidden_markov, HMM_COUNTS)
    assert adapted.enumerated == ("hidden",) and set(adapted.families) == {"trans", "rates"}
    value = jax.jit(adapted.logdensity_fn)
    for seed in range(3):
        latents = _latents(poisson_hidden_markov, HMM_COUNTS, seed=seed)
        np.testing.assert_allclose(
            value(latents, adapted.data), forward_algorithm(latents, HMM_COUNTS), rtol=2e-6, atol=1e-4
        )

"""An ordered latent of a NumPyro model starts at its prior's median
(:func:`grepvi.interop.numpyro_model._ordered_start`): the start, and a three-component mixture
fitted with the defaults (started at 0, its components merged into one)."""

import numpy as np
import pytest

pytest.importorskip("numpyro")

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.distributions.transforms import OrderedTransform  # noqa: E402

from grepvi.families.transformed import TransformedNormal  # noqa: E402
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

_RNG = np.random.default_rng(7)
THREE_CLUSTERS = np.concatenate(
    [_RNG.normal(-4.0, 1.0, 50), _RNG.normal(0.0, 0.7, 60), _RNG.normal(5.0, 1.5, 40)]
).astype(np.float32)


# benchmarks/user_models.py's three_clusters data set: clusters at -4, 0 and 5
BENCHMARK_CLUSTERS = np.concatenate(
    [
        np.random.default_rng(77).normal(-4.0, 1.0, 50),
        np.random.default_rng(78).normal(0.0, 0.7, 60),
        np.random.default_rng(79).normal(5.0, 1.5, 40),
    ]
).astype(np.float32)


def _mixture3(y):
    weights = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    prior = dist.Normal(0.0, 10.0).expand([3]).to_event(1)
    loc = numpyro.sample("loc", dist.TransformedDistribution(prior, OrderedTransform()))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([3]).to_event(1))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(dist.Categorical(weights), dist.Normal(loc, scale)), obs=y)


def test_an_ordered_latent_starts_at_its_prior_median():
    """Three order statistics of Normal(0, 10): their medians are about -8.5, 0 and 8.5 (15
    draws: within a few units); the unconstrained start is their first element and the logs
    of their gaps. A family the user names keeps its own start (0)."""
    family = from_numpyro(_mixture3, THREE_CLUSTERS).latents()["loc"]
    assert isinstance(family, TransformedNormal)
    start = np.asarray(family.init_params()["loc"])
    locations = np.asarray(family.transform_(jnp.asarray(start)))
    assert np.all(np.diff(locations) > 2.0) and locations[0] < -3.0 < 3.0 < locations[-1], locations
    np.testing.assert_allclose(start[1:], np.log(np.diff(locations)), rtol=1e-5)
    named = from_numpyro(_mixture3, THREE_CLUSTERS, families={"loc": "transformed-normal"}).latents()["loc"]
    np.testing.assert_array_equal(np.asarray(named.init_params()["loc"]), np.zeros(3, np.float32))


def test_a_positive_ordered_latent_starts_inside_its_support_and_a_bad_median_is_ignored():
    from numpyro.distributions import constraints

    from grepvi.interop.numpyro_model import _ordered_start

    family = TransformedNormal(shape=(2,), constraint=constraints.positive_ordered_vector)
    started = _ordered_start(family, {"prior_median": np.array([0.5, 4.0], np.float32)})
    rates = np.asarray(started.transform_(jnp.asarray(started.init_params()["loc"])))
    np.testing.assert_allclose(rates, [0.5, 4.0], rtol=1e-5)
    for median in (np.array([2.0, 2.0], np.float32), np.array([-1.0, 3.0], np.float32), None):
        kept = _ordered_start(family, {"prior_median": median})  # equal, outside, none: log of 0 or < 0
        np.testing.assert_array_equal(np.asarray(kept.init_params()["loc"]), np.zeros(2, np.float32))


def test_three_clusters_are_found_by_the_defaults():
    """Started at 0 (locations 0, 1, 2), every rule of the trial merged the three components
    into one wide normal (ELBO about -421; later its gaps' draws underflowed and the fit
    stopped on non-finite gradients); NumPyro's AutoNormal, started at random, found the
    clusters (ELBO about -377). From the prior's median the default fit finds them."""
    result = from_numpyro(_mixture3, THREE_CLUSTERS).fit(progress=False)
    assert result.converged, result.convergence
    final = float(np.mean(result.trace.elbo[-500:]))
    assert final > -385.0, final  # the merged component's optimum is near -421
    family = from_numpyro(_mixture3, THREE_CLUSTERS).latents()["loc"]
    locations = np.asarray(family.transform_(jnp.asarray(result.params["loc"]["loc"])))
    np.testing.assert_allclose(locations, [-4.0, 0.0, 5.0], atol=0.8)


def test_an_ordered_draw_whose_gap_underflows_stays_strictly_increasing():
    """A log-gap of -60 (``exp`` below float32's resolution at 1.5): the plain transform ties the
    two elements and the prior's inversion takes ``log(0)``; the family's draw is lifted to the
    next float, so the model's prior and its gradient are finite. Draws already apart are
    unchanged, bit for bit."""
    import jax
    from numpyro.distributions import constraints

    family = TransformedNormal(shape=(3,), constraint=constraints.ordered_vector)
    prior = dist.TransformedDistribution(dist.Normal(0.0, 10.0).expand([3]).to_event(1), OrderedTransform())
    params = {"loc": jnp.array([1.5, -60.0, 0.0]), "scale": jnp.full(3, -5.0)}
    eps = jnp.zeros(3)
    plain = OrderedTransform()(params["loc"] + jax.nn.softplus(params["scale"]) * eps)
    assert plain[0] == plain[1]  # the prior's inversion would take log(plain[1] - plain[0]) = log(0)
    z = family.transform(params, eps)
    assert np.all(np.diff(np.asarray(z)) > 0), z

    def model_prior(p):
        return prior.log_prob(family.transform(p, eps))

    value, grad = jax.value_and_grad(model_prior)(params)
    assert np.isfinite(float(value)) and all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grad))
    apart = {"loc": jnp.array([1.5, -1.0, 0.5]), "scale": jnp.full(3, -1.0)}
    draws = jax.random.normal(jax.random.key(0), (50, 3))
    lifted = jax.vmap(lambda e: family.transform(apart, e))(draws)
    exact = jax.vmap(lambda e: OrderedTransform()(apart["loc"] + jax.nn.softplus(apart["scale"]) * e))(draws)
    np.testing.assert_array_equal(np.asarray(lifted), np.asarray(exact))


def test_of_the_two_starts_the_one_the_model_prefers_is_kept():
    """``_better_starts``: the prior's median or the unconstrained 0, whichever has the higher
    log joint at the families' initial means (the median on a tie or where the model fails)."""
    from types import SimpleNamespace

    from numpyro.distributions import constraints

    from grepvi.interop.numpyro_model import _better_starts, _ordered_start

    zero = {"c": TransformedNormal(shape=(3,), constraint=constraints.ordered_vector)}
    median = {"c": _ordered_start(zero["c"], {"prior_median": np.array([-6.0, -1.0, 5.0], np.float32)})}
    joint = SimpleNamespace(logdensity_fn=lambda inputs, data: -jnp.sum((inputs["c"] - data) ** 2))
    assert _better_starts(median, zero, joint, jnp.array([-5.0, 0.0, 4.0])) is median
    assert _better_starts(median, zero, joint, jnp.array([0.0, 1.0, 2.5])) is zero
    failing = SimpleNamespace(logdensity_fn=lambda inputs, data: jnp.log(-jnp.ones(())))  # nan
    assert _better_starts(median, zero, failing, jnp.zeros(3)) is median
    assert _better_starts(zero, zero, joint, jnp.zeros(3)) is zero  # no ordered latent: nothing run


def _poisson_mixture(counts):
    from numpyro.distributions.transforms import ComposeTransform, ExpTransform

    weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(2)))
    ordered_positive = ComposeTransform([OrderedTransform(), ExpTransform()])  # biject_to's own
    base = dist.Normal(1.0, 1.5).expand([2]).to_event(1)
    rates = numpyro.sample("rates", dist.TransformedDistribution(base, ordered_positive))
    with numpyro.plate("obs", counts.shape[0]):
        numpyro.sample(
            "counts", dist.MixtureSameFamily(dist.Categorical(weights), dist.Poisson(rates)), obs=counts
        )


def test_rates_ordered_through_exp_get_the_positive_ordered_support():
    """``OrderedTransform`` then ``ExpTransform`` (NumPyro's bijection to positive ordered
    vectors) reports the ``positive`` support of its last transform; a family on ``positive``
    started both rates at one value, where the prior takes the log of their gap (0) and the
    fit stopped with ``ModelError`` before its first step. The adapter reads the support from
    the transforms: a positive ordered family, the model finite at its start."""
    from numpyro.distributions import constraints

    from grepvi.target import inputs_at_means

    counts = np.concatenate([_RNG.poisson(2.0, 40), _RNG.poisson(11.0, 60)]).astype(np.float32)
    adapted = from_numpyro(_poisson_mixture, counts)
    family = adapted.latents()["rates"]
    assert isinstance(family, TransformedNormal) and family.constraint is constraints.positive_ordered_vector
    params = {name: f.init_params() for name, f in adapted.latents().items()}
    target = adapted.target()
    value = target.logdensity_fn(inputs_at_means(params, target.families, True), adapted.data)
    assert np.isfinite(float(value))


# A mixture's ordered locations start where a short search of the point log density found the
# model's best optimum (grepvi.interop.numpyro_model._searched_ordered_starts).


def _ordered_logistic(x, y):
    beta = numpyro.sample("beta", dist.Normal(0.0, 3.0))
    prior = dist.Normal(0.0, 3.0).expand([3]).to_event(1)
    cutpoints = numpyro.sample("cutpoints", dist.TransformedDistribution(prior, OrderedTransform()))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.OrderedLogistic(beta * x, cutpoints), obs=y)


def test_the_start_of_a_mixtures_locations_is_in_the_clusters():
    """From the prior's median (-6.5, -3.5, 4.9) two components sat on the first cluster."""
    family = from_numpyro(_mixture3, BENCHMARK_CLUSTERS).latents()["loc"]
    start = np.asarray(family.transform_(jnp.asarray(family.init_params()["loc"])))
    np.testing.assert_allclose(start, [-4.0, 0.0, 5.0], atol=0.8)


def test_the_defaults_reach_the_clusters_optimum():
    """From the prior's median the fit ran 137.8 s to the draws cap at ELBO -413.7 (two
    components on the first cluster; NumPyro SVI's AutoNormal reached -407.5, two on the second);
    from the clusters, -374.0."""
    result = from_numpyro(_mixture3, BENCHMARK_CLUSTERS).fit(progress=False)
    assert result.converged, result.convergence
    final = float(np.mean(result.trace.elbo[-500:]))
    assert final > -380.0, final
    family = from_numpyro(_mixture3, BENCHMARK_CLUSTERS).latents()["loc"]
    locations = np.asarray(family.transform_(jnp.asarray(result.params["loc"]["loc"])))
    np.testing.assert_allclose(locations, [-4.0, 0.0, 5.0], atol=0.8)


def test_only_a_model_with_a_mixture_is_searched(monkeypatch):
    """An ordered logistic regression's cut points (one optimum) keep the better of the prior's
    median and 0, as before: the search's compilation (0.5-0.7 s) is spent on mixtures only."""
    from grepvi.interop import numpyro_model

    searched = []
    monkeypatch.setattr(
        numpyro_model,
        "_searched_ordered_starts",
        lambda families, *args, **kwargs: searched.append(1) or families,
    )
    rng = np.random.default_rng(3)
    x = rng.normal(size=200).astype(np.float32)
    y = np.digitize(x + rng.logistic(size=200), [-1.0, 0.0, 1.0]).astype(np.int32)
    from_numpyro(_ordered_logistic, x, y)
    assert not searched
    from_numpyro(_mixture3, BENCHMARK_CLUSTERS)
    assert searched == [1]

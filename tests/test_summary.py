"""``repr(result)`` and ``result.summary()`` (:mod:`grepvi.inference.summary`).

The exact quantiles are checked against draws of each family's own sampler: the empirical
CDF of ``n`` draws at the ``p`` quantile is ``p`` within five of its standard errors,
``sqrt(p (1 - p) / n)`` (a wrong parameter mapping moves it by far more)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi.errors import ConfigError
from grepvi.families import Beta, Dirichlet, Gamma, LogitNormal, LogNormal, Normal, Posterior
from grepvi.families.transformed import Affine
from grepvi.inference import summary

LEVELS = np.array([0.05, 0.5, 0.95])
NUM_DRAWS = 100_000

FAMILIES = {
    "normal": Normal(shape=(2,), init_loc=-1.5, init_scale=0.3),
    "lognormal": LogNormal(shape=(), init_loc=0.4, init_scale=1.2),
    "logitnormal": LogitNormal(shape=(), init_loc=-2.0, init_scale=0.7),
    "gamma_small_shape": Gamma(shape=(2,), init_concentration=0.1, init_mean=2.0),
    "gamma": Gamma(shape=(), init_concentration=7.0, init_mean=0.01),
    "beta": Beta(shape=(), init_concentration1=0.5, init_concentration0=3.0),
    "dirichlet": Dirichlet(shape=(4,), init_concentration=0.8),
    "affine_negative": Affine(
        base=Beta(shape=(), init_concentration1=2.0, init_concentration0=5.0), loc=1.0, scale=-2.0
    ),
    "affine_gamma": Affine(
        base=Gamma(shape=(3,), init_concentration=0.3, init_mean=1.0), loc=-4.0, scale=0.5
    ),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_exact_quantiles_match_the_families_draws(name):
    family = FAMILIES[name]
    params = family.init_params()
    natural = jax.tree_util.tree_map(np.asarray, family.natural_params(params))
    quantiles = summary._marginal_quantiles(family, natural, LEVELS)
    assert quantiles is not None and quantiles.shape == (3, *family.shape)
    draws = np.asarray(jax.jit(lambda p: family.sample(p, jax.random.key(3), (NUM_DRAWS,)))(params))
    below = np.mean(draws[None] <= quantiles[:, None], axis=1)  # (levels, *shape)
    level = LEVELS.reshape((-1,) + (1,) * len(family.shape))
    standard_error = np.sqrt(level * (1 - level) / NUM_DRAWS)
    assert np.all(np.abs(below - level) < 5 * standard_error), (below, level)


def _stub(posterior):
    return types.SimpleNamespace(posterior=posterior, convergence=None)


def test_table_rows_are_the_families_moments_and_quantiles():
    posterior = {name: Posterior(family, family.init_params()) for name, family in FAMILIES.items()}
    text = summary.posterior_table(_stub(posterior), max_rows=100)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
    gamma = FAMILIES["gamma_small_shape"]
    params = gamma.init_params()
    mean, sd = np.asarray(gamma.mean(params)), np.asarray(gamma.variance(params)) ** 0.5
    natural = jax.tree_util.tree_map(np.asarray, gamma.natural_params(params))
    q = summary._marginal_quantiles(gamma, natural, LEVELS)
    for i in range(2):
        expected = [mean[i], sd[i], *q[:, i]]
        np.testing.assert_allclose([float(v) for v in rows[f"gamma_small_shape[{i}]"]], expected, rtol=1e-3)
    assert len(rows) == 2 + 1 + 1 + 2 + 1 + 1 + 4 + 1 + 3  # one row per latent element
    assert "dirichlet[3]" in rows and "affine_gamma[2]" in rows


def test_families_without_closed_form_quantiles_are_drawn():
    from grepvi.families import SimplexNormal

    family = SimplexNormal(shape=(3,))
    stats = summary._statistics({"w": Posterior(family, family.init_params())}, LEVELS, 20_000, 0)
    mean, _, quantiles = stats["w"]
    draws = np.asarray(
        family.sample(family.init_params(), jax.random.split(jax.random.key(0), 1)[0], (20_000,))
    )
    np.testing.assert_allclose(quantiles, np.quantile(draws, LEVELS, axis=0), atol=1e-6)
    assert np.all((quantiles > 0) & (quantiles < 1)) and mean.shape == (3,)


def test_rows_past_max_rows_are_counted_and_bad_arguments_named():
    family = Normal(shape=(10,))
    text = summary.posterior_table(_stub({"x": Posterior(family, family.init_params())}), max_rows=4)
    assert "x[3]" in text and "x[4]" not in text
    assert "6 more element(s) of 'x'" in text
    with pytest.raises(ConfigError, match="quantiles"):
        summary.posterior_table(_stub({"x": Posterior(family, family.init_params())}), quantiles=(0.5, 1.5))
    with pytest.raises(ConfigError, match="max_rows"):
        summary.posterior_table(_stub({"x": Posterior(family, family.init_params())}), max_rows=0)


def test_repr_and_summary_of_a_fit():
    counts = jnp.array([3.0, 5.0, 4.0])

    def logdensity_fn(z):
        rate = z["rate"]
        return jnp.log(rate) - rate + jnp.sum(counts * jnp.log(rate) - rate)

    result = grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma()}, progress=False)
    text = repr(result)
    assert len(text) < 300, text  # not the run state's arrays
    assert "converged=True" in text and "reason='converged'" in text
    assert f"num_iterations={result.convergence.num_iterations}" in text
    assert "'rate': Gamma" in text and "Array(" not in text
    table = result.summary()
    assert table.splitlines()[0] == result.convergence.summary()
    row = [line for line in table.splitlines() if line.split()[:1] == ["rate"]][0].split()
    # the exact posterior is Gamma(2 + 12, 1 + 3): q's mean within 1% of 14 / 4
    assert float(row[1]) == pytest.approx(3.5, rel=0.01)
    assert float(row[2]) == pytest.approx(14**0.5 / 4, rel=0.02)


def test_final_elbo_is_the_papers_criterion():
    from grepvi.diagnostics.evaluation import best_final_elbo

    rng = np.random.default_rng(0)
    elbo = rng.normal(-100.0, 3.0, size=237)
    elbo[[5, 230]] = np.nan  # not evaluated
    elbo[233] = -np.inf  # a non-finite estimate in the tail
    trace = types.SimpleNamespace(elbo=elbo)
    assert summary.final_elbo(trace) == pytest.approx(best_final_elbo(elbo))
    assert summary.final_elbo(types.SimpleNamespace(elbo=np.array([]))) != summary.final_elbo(trace)

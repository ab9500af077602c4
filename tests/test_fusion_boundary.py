"""The draws' fusion boundary: same values, one computation of each draw in the compiled step."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
import grepvi.estimators.base
import grepvi.sampling
from grepvi.estimators.base import get_estimator, sample_standardized
from grepvi.fusion_boundary import computed_once, predicate_of
from grepvi.inference.state import initial_params, make_target

Y = jnp.linspace(-1.0, 2.0, 50)


def _ridge(z):
    residual = Y - z["a"] - z["b"]
    prior = -0.01 * (z["a"] ** 2 + z["b"] ** 2) - z["s"]
    return prior - jnp.sum(residual**2) / (2 * z["s"] ** 2) - Y.size * jnp.log(z["s"])


FAMILIES = {"a": grepvi.Normal(), "b": grepvi.Normal(), "s": grepvi.Gamma()}


def _prepared(num_samples=4):
    estimator = get_estimator("grep", num_samples=num_samples)
    target = make_target(_ridge, FAMILIES)
    target = target._replace(families=estimator.adapt_families(target.families))
    return estimator, target, initial_params(jax.random.key(0), target.families, None)


def _fusions_computing_erf_inv(estimator, target, params) -> int:
    program = jax.jit(lambda key, p: estimator.estimate(key, p, target)[0])
    text = program.lower(jax.random.key(1), params).compile().as_text()
    computations = re.split(r"\n(?=\S)", text)
    return sum(1 for c in computations if c.lstrip().startswith("%") and "erf_inv" in c)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the boundary is CPU-only")
def test_each_normal_draw_is_computed_in_one_fusion_not_in_every_consumer(monkeypatch):
    # a two-normal, one-gamma ridge: without the boundary XLA put a normal's erf_inv in 18
    # computations of the 4-draw G-REP estimate; with it, one per normal draw (a, b and the
    # gamma sampler's proposal normal)
    with_boundary = _fusions_computing_erf_inv(*_prepared())
    monkeypatch.setattr(grepvi.estimators.base, "computed_once", lambda tree, *a, **k: tree)
    monkeypatch.setattr(grepvi.sampling, "computed_once", lambda tree, *a, **k: tree)
    without = _fusions_computing_erf_inv(*_prepared())
    assert 0 < with_boundary <= 4
    assert without >= 2 * with_boundary


def test_the_boundary_changes_no_value_gradient_or_batch():
    tree = {"x": jnp.array([1.5, -2.0, 0.0]), "n": jnp.array(3), "flag": jnp.array(True)}
    predicate = predicate_of(tree["x"])
    out = jax.jit(lambda t: computed_once(t, predicate_of(t["x"])))(tree)
    for name in tree:
        np.testing.assert_array_equal(np.asarray(out[name]), np.asarray(tree[name]))
        assert out[name].dtype == tree[name].dtype
    grad = jax.grad(lambda x: jnp.sum(computed_once(x, predicate) ** 2))(tree["x"])
    np.testing.assert_array_equal(np.asarray(grad), 2 * np.asarray(tree["x"]))
    # a batched predicate is a select under vmap: the same values
    batched = jax.vmap(lambda x: computed_once(x * 2, predicate_of(x)))(jnp.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(batched), 2 * np.arange(6.0).reshape(2, 3))
    # a NaN predicate takes the other branch: still the values
    nan = jnp.array([jnp.nan, 1.0])
    np.testing.assert_array_equal(np.asarray(computed_once(nan, predicate_of(nan))), np.asarray(nan))


def test_only_trees_within_max_elements_get_the_conditional():
    small, large = jnp.ones(8), jnp.ones(64)
    small_jaxpr = str(jax.make_jaxpr(lambda t: computed_once(t, predicate_of(t), 16))(small))
    large_jaxpr = str(jax.make_jaxpr(lambda t: computed_once(t, predicate_of(t), 16))(large))
    assert ("cond" in small_jaxpr) == (jax.default_backend() == "cpu")
    assert "cond" not in large_jaxpr


def test_standardized_draws_are_the_same_with_and_without_the_boundary(monkeypatch):
    _, target, params = _prepared()
    keys = jax.random.split(jax.random.key(3), 64)
    draw = jax.jit(jax.vmap(lambda k: sample_standardized(k, params, target.families)))
    with_boundary = draw(keys)
    monkeypatch.setattr(grepvi.estimators.base, "computed_once", lambda tree, *a, **k: tree)
    monkeypatch.setattr(grepvi.sampling, "computed_once", lambda tree, *a, **k: tree)
    without = jax.jit(jax.vmap(lambda k: sample_standardized(k, params, target.families)))(keys)
    for name in with_boundary:
        np.testing.assert_allclose(
            np.asarray(with_boundary[name]), np.asarray(without[name]), rtol=1e-6, atol=1e-7
        )


def test_an_anchor_without_elements_gives_a_true_predicate():
    assert bool(predicate_of({"empty": jnp.zeros((0,)), "none": None}))
    tree = jnp.array([2.0])
    np.testing.assert_array_equal(np.asarray(computed_once(tree, predicate_of({}))), [2.0])


def test_a_boolean_is_computed_once_too():
    """A boolean's two branches would both be the identity, and XLA deletes such a
    conditional: it crosses as a float, so the boundary stays and the value is the same."""
    x = jnp.linspace(-1.0, 1.0, 7)

    def guarded(x):
        flag = computed_once(jnp.all(jnp.isfinite(jnp.exp(x))), predicate_of(x))
        return jnp.where(flag, x, 0.0), jnp.where(flag, 2 * x, 1.0)

    if jax.default_backend() == "cpu":
        text = jax.jit(guarded).lower(x).compile().as_text()
        assert "conditional" in text
    flag = jax.jit(lambda x: computed_once(jnp.all(x > -2), predicate_of(x)))(x)
    assert flag.dtype == jnp.bool_ and bool(flag)

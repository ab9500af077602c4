"""Special functions evaluated in batches (:mod:`grepvi.inference.special_batches`): the same
numbers up to rounding, and fewer calls in the program XLA compiles."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from jax import lax

import grepvi
from grepvi import numerics
from grepvi.inference import special_batches
from grepvi.inference.special_batches import batched_special_functions, special_calls


def _calls(function, *args) -> int:
    return special_calls(jax.make_jaxpr(function)(*args))


def _many_levels(x, y):
    """gammaln of five different arrays (one level), digamma of their sum (the next)."""
    first = [numerics.gammaln(x + i) for i in range(4)] + [numerics.gammaln(y)]
    total = sum(jnp.sum(f) for f in first)
    return numerics.digamma(total + x) * numerics.trigamma(y[:3]).sum() + numerics.gammaln(2.5)


X = jnp.linspace(0.05, 30.0, 7, dtype=jnp.float32)
Y = jnp.array([0.001, 0.3, 1.0, 4.5, 1e4], jnp.float32)


def test_one_call_per_function_and_level_with_the_same_numbers():
    batched = batched_special_functions(_many_levels)
    # gammaln: 5 arrays and a literal at the first level; trigamma at the first level;
    # digamma at the second: three calls where there were eight
    assert _calls(_many_levels, X, Y) == 8
    assert _calls(batched, X, Y) == 3
    np.testing.assert_allclose(jax.jit(batched)(X, Y), jax.jit(_many_levels)(X, Y), rtol=3e-7)


def test_gradients_inside_loops_and_conds_are_batched_in_their_bodies():
    def log_joint(a, data):
        return jnp.sum(numerics.gammaln(a * data) - numerics.gammaln(a) + numerics.betaln(a, data + 1.0))

    def step(a, data):
        def body(carry, row):
            value, grad = jax.value_and_grad(log_joint)(carry, row)
            return carry - 0.01 * grad, value

        a, values = lax.scan(body, a, data)
        a = lax.cond(a.sum() > 0, lambda v: v * numerics.digamma(v + 1.0), lambda v: v, a)
        return a, values, jax.grad(log_joint)(a, data[0])

    a = jnp.array([0.7, 2.0, 15.0], jnp.float32)
    data = jnp.abs(jax.random.normal(jax.random.key(0), (4, 3))) * 3 + 0.1
    batched = batched_special_functions(step)
    assert _calls(batched, a, data) < _calls(step, a, data)
    for got, want in zip(jax.jit(batched)(a, data), jax.jit(step)(a, data), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-6)


def test_primitives_are_batched_by_name_and_parameters():
    def f(x, y):
        return jsp.gammaln(x).sum() + jsp.gammaln(y).sum() + jsp.digamma(x).sum() + jsp.digamma(y[:2]).sum()

    batched = batched_special_functions(f)
    assert _calls(f, X, Y) == 4
    assert _calls(batched, X, Y) == 2
    np.testing.assert_allclose(jax.jit(batched)(X, Y), jax.jit(f)(X, Y), rtol=3e-7)


def test_calls_on_one_input_are_evaluated_once():
    def f(x):
        return numerics.gammaln(x) * 2.0 + numerics.gammaln(x) ** 2 + jnp.sin(x)

    batched = batched_special_functions(f)
    assert _calls(batched, X) == 1
    np.testing.assert_array_equal(jax.jit(batched)(X), jax.jit(f)(X))


def test_pytrees_in_and_out():
    def f(tree):
        return {"g": numerics.gammaln(tree["a"]), "d": (numerics.gammaln(tree["b"]), tree["b"] + 1)}

    tree = {"a": X, "b": Y}
    got = batched_special_functions(f)(tree)
    want = f(tree)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=3e-7)


def test_a_function_it_cannot_evaluate_again_is_called_as_it_is(monkeypatch):
    def broken(*args):
        raise RuntimeError("cannot bind")

    monkeypatch.setattr(special_batches, "_evaluate", broken)
    batched = batched_special_functions(_many_levels)
    assert _calls(batched, X, Y) == 8
    np.testing.assert_array_equal(jax.jit(batched)(X, Y), jax.jit(_many_levels)(X, Y))


def test_effects_keep_their_order():
    seen = []

    def f(x):
        a = numerics.gammaln(x)
        jax.debug.callback(lambda v: seen.append(("first", float(v))), a.sum(), ordered=True)
        b = numerics.gammaln(numerics.digamma(x) ** 2)  # a later level
        jax.debug.callback(lambda v: seen.append(("second", float(v))), x.sum(), ordered=True)
        jax.debug.callback(lambda v: seen.append(("third", float(v))), b.sum(), ordered=True)
        return a + b

    batched = jax.jit(batched_special_functions(f))
    jax.block_until_ready(batched(X))
    jax.effects_barrier()
    assert [name for name, _ in seen] == ["first", "second", "third"]


@pytest.mark.parametrize("shape", [(), (3, 2)])
def test_small_gamma_shapes_and_scalars(shape):
    def f(x):
        return numerics.gammaln(x), numerics.digamma(x * 0.5), numerics.gammaln(x * 0.5)

    x = jnp.full(shape, 0.01, jnp.float32)
    for got, want in zip(jax.jit(batched_special_functions(f))(x), jax.jit(f)(x), strict=True):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=3e-7)


def test_a_default_fit_batches_a_small_models_step_and_lands_where_the_plain_step_does(monkeypatch):
    """``fit``'s window evaluates its step's special functions in batches (the gamma family's
    G-REP gradient calls them at several levels); the answer is the plain step's to rounding."""
    from grepvi.inference import driver
    from grepvi.testing import gamma_poisson

    asked = []
    original = driver.make_window

    def recording(step_fn, length, *args, **kwargs):
        asked.append(kwargs.get("batched_specials"))
        return original(step_fn, length, *args, **kwargs)

    monkeypatch.setattr(driver, "make_window", recording)
    model = gamma_poisson(shape=(3,))
    batched = grepvi.fit(model.logdensity_fn, model.families, progress=False)
    assert asked and all(asked)
    monkeypatch.setattr(special_batches, "batched_special_functions", lambda function: function)
    plain = grepvi.fit(model.logdensity_fn, model.families, progress=False)
    assert batched.converged and plain.converged
    for name, posterior in batched.posterior.items():
        np.testing.assert_allclose(posterior.mean(), plain.posterior[name].mean(), rtol=1e-3)
        np.testing.assert_allclose(posterior.variance(), plain.posterior[name].variance(), rtol=1e-2)

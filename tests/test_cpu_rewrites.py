"""A model's primitives that are slow on CPU, rewritten (grepvi.inference.cpu_rewrites): small matrix
products as a multiply and a sum, cumulative reductions as a sequential scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import grepvi
from grepvi.inference import fitting
from grepvi.inference.cpu_rewrites import (
    MAX_CONTRACTION,
    cpu_rewritten,
    multiply_and_sum,
    rewrites,
    sequential_cumulative,
)
from grepvi.inference.state import make_target


def _equations(jaxpr):
    """Every equation of ``jaxpr``, its sub-jaxprs' included."""
    from grepvi.inference.cost import sub_jaxprs

    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from _equations(sub)


def _dot_generals(jaxpr) -> list:
    """Every ``dot_general`` equation's operand shapes, sub-jaxprs included."""
    return [
        tuple(var.aval.shape for var in eqn.invars)
        for eqn in _equations(jaxpr)
        if eqn.primitive is lax.dot_general_p
    ]


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, dimension_numbers",
    [
        ((2, 3), (3, 4), (((1,), (0,)), ((), ()))),  # a @ b
        ((3,), (3,), (((0,), (0,)), ((), ()))),  # a vector's dot
        ((5, 2, 3), (5, 3, 2), (((2,), (1,)), ((0,), (0,)))),  # batched, as vmap makes it
        ((3, 2), (2, 3), (((0,), (1,)), ((), ()))),  # a.T @ b.T: contracted axes not last
        ((2, 3, 2), (3, 2, 4), (((1, 2), (0, 1)), ((), ()))),  # two contracted axes
        ((2,), (3,), (((), ()), ((), ()))),  # an outer product: nothing contracted
        ((4, 2, 3), (3, 4), (((2,), (0,)), ((0,), (1,)))),  # batch axis not first on the right
    ],
)
def test_multiply_and_sum_is_dot_general(lhs_shape, rhs_shape, dimension_numbers):
    rng = np.random.default_rng(0)
    lhs = jnp.asarray(rng.normal(size=lhs_shape), jnp.float32)
    rhs = jnp.asarray(rng.normal(size=rhs_shape), jnp.float32)
    expected = lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.HIGHEST)
    found = multiply_and_sum(lhs, rhs, dimension_numbers)
    assert found.shape == expected.shape
    np.testing.assert_allclose(np.asarray(found), np.asarray(expected), rtol=1e-6, atol=1e-6)


def _kalman_logdensity(z, y):
    """A local-linear-trend filter's log likelihood: 2x2 products at every step."""
    transition = jnp.array([[1.0, 1.0], [0.0, 1.0]])
    noise = jnp.diag(jnp.exp(2.0 * z["log_scales"][1:]))
    obs_var = jnp.exp(2.0 * z["log_scales"][0])

    def step(carry, y_t):  # predict from the last update, then update on y_t
        mean, cov = carry
        mean, cov = transition @ mean, transition @ cov @ transition.T + noise
        s = cov[0, 0] + obs_var  # the one-step prediction's variance
        residual = y_t - mean[0]
        k = cov[:, 0] / s
        updated = (mean + k * residual, cov - s * jnp.outer(k, k))
        return updated, -0.5 * (jnp.log(2.0 * jnp.pi * s) + residual**2 / s)

    _, log_liks = lax.scan(step, (jnp.stack([y[0], 0.0]), jnp.diag(jnp.array([4.0, 1.0]))), y)
    return jnp.sum(log_liks) - 0.5 * jnp.sum(z["log_scales"] ** 2)


def test_a_filters_products_are_rewritten_and_its_value_and_gradient_kept():
    y = jnp.asarray(np.cumsum(np.random.default_rng(1).normal(size=40)), jnp.float32)
    original = jax.vmap(jax.value_and_grad(_kalman_logdensity), in_axes=(0, None))
    rewritten = jax.vmap(jax.value_and_grad(cpu_rewritten(_kalman_logdensity)), in_axes=(0, None))
    z = {"log_scales": jnp.asarray(np.random.default_rng(2).normal(size=(8, 3)) * 0.5, jnp.float32)}
    assert len(_dot_generals(jax.make_jaxpr(original)(z, y))) > 0
    assert _dot_generals(jax.make_jaxpr(rewritten)(z, y)) == []  # gradient's products as well
    (value, grad), (value_new, grad_new) = original(z, y), rewritten(z, y)
    np.testing.assert_allclose(np.asarray(value_new), np.asarray(value), rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(grad_new["log_scales"]), np.asarray(grad["log_scales"]), rtol=1e-4, atol=1e-4
    )


def test_large_products_and_functions_without_small_ones_are_kept():
    a = jnp.ones((8, 8))
    big = lambda x: jnp.sum((x @ a) @ x)  # noqa: E731 - contracts 8 elements
    data = jnp.ones((100, MAX_CONTRACTION))
    data_sized = lambda b: jnp.sum(data @ b)  # noqa: E731 - an operand of 600 elements
    x, b = jnp.ones((8, 8)), jnp.ones(MAX_CONTRACTION)
    assert rewrites(jax.make_jaxpr(big)(x)) == 0
    assert rewrites(jax.make_jaxpr(data_sized)(b)) == 0
    assert len(_dot_generals(jax.make_jaxpr(cpu_rewritten(big))(x))) == 2
    assert len(_dot_generals(jax.make_jaxpr(cpu_rewritten(data_sized))(b))) == 1
    assert float(cpu_rewritten(big)(x)) == float(big(x))


def test_the_fit_evaluates_the_model_with_its_small_products_rewritten_on_cpu_only(monkeypatch):
    y = jnp.asarray(np.cumsum(np.random.default_rng(1).normal(size=40)), jnp.float32)
    target = make_target(_kalman_logdensity, {"log_scales": grepvi.Normal(shape=(3,))}, takes_data=True)
    replayed = fitting.replayed_target(target)
    z = {"log_scales": jnp.zeros(3)}
    assert rewrites(jax.make_jaxpr(target.logdensity_fn)(z, y)) == 3
    assert _dot_generals(jax.make_jaxpr(replayed.logdensity_fn)(z, y)) == []
    np.testing.assert_allclose(
        float(replayed.logdensity_fn(z, y)), float(target.logdensity_fn(z, y)), rtol=1e-6
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # the library's products are fast there
    on_gpu = fitting.replayed_target(target)
    assert len(_dot_generals(jax.make_jaxpr(on_gpu.logdensity_fn)(z, y))) == 3


_CUMULATIVES = {
    "cumlogsumexp": (lax.cumlogsumexp, jnp.logaddexp, -np.inf),
    "cumprod": (lax.cumprod, lax.mul, 1.0),
    "cummax": (lax.cummax, lax.max, -np.inf),
    "cummin": (lax.cummin, lax.min, np.inf),
}


@pytest.mark.parametrize("name", sorted(_CUMULATIVES))
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_sequential_cumulative_is_the_reduction_and_its_gradient(name, axis, reverse):
    native, combine, identity = _CUMULATIVES[name]
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.uniform(0.5, 1.5, size=(7, 5)), jnp.float32)  # distinct: no ties in max/min
    weights = jnp.asarray(rng.normal(size=(7, 5)), jnp.float32)

    def loss(cumulative):
        return lambda v: jnp.sum(weights * cumulative(v))

    expected = native(x, axis=axis, reverse=reverse)
    sequential = lambda v: sequential_cumulative(v, combine, identity, axis=axis, reverse=reverse)  # noqa: E731
    np.testing.assert_allclose(np.asarray(sequential(x)), np.asarray(expected), rtol=1e-5, atol=1e-6)
    gradient = jax.grad(loss(lambda v: native(v, axis=axis, reverse=reverse)))(x)
    np.testing.assert_allclose(
        np.asarray(jax.grad(loss(sequential))(x)), np.asarray(gradient), rtol=1e-4, atol=1e-5
    )


def _cox_logdensity(z, data):
    """A Cox partial likelihood (subjects sorted by time): each event's linear predictor against
    the log sum of ``exp`` over everyone still at risk, a reverse ``cumlogsumexp``."""
    x, event = data
    eta = x @ z["beta"]
    return jnp.sum(event * (eta - lax.cumlogsumexp(eta, reverse=True))) - 0.5 * jnp.sum(z["beta"] ** 2)


def _primitives(jaxpr) -> set:
    return {eqn.primitive.name for eqn in _equations(jaxpr)}


def test_a_risk_sets_cumulative_reduction_is_rewritten_value_and_gradient_kept():
    rng = np.random.default_rng(4)
    data = (
        jnp.asarray(rng.normal(size=(60, 3)), jnp.float32),
        jnp.asarray(rng.integers(0, 2, 60), jnp.float32),
    )
    z = {"beta": jnp.asarray(rng.normal(size=(8, 3)) * 0.5, jnp.float32)}
    original = jax.vmap(jax.value_and_grad(_cox_logdensity), in_axes=(0, None))
    rewritten = jax.vmap(jax.value_and_grad(cpu_rewritten(_cox_logdensity)), in_axes=(0, None))
    assert "cumlogsumexp" in _primitives(jax.make_jaxpr(_cox_logdensity)({"beta": z["beta"][0]}, data))
    assert "cumlogsumexp" not in _primitives(
        jax.make_jaxpr(cpu_rewritten(_cox_logdensity))({"beta": z["beta"][0]}, data)
    )
    # differentiated, the reduction is JAX's parallel prefix scan (slices and concatenations)
    assert "concatenate" in _primitives(jax.make_jaxpr(original)(z, data))
    assert "concatenate" not in _primitives(jax.make_jaxpr(rewritten)(z, data))
    assert "scan" in _primitives(jax.make_jaxpr(rewritten)(z, data))
    (value, grad), (value_new, grad_new) = original(z, data), rewritten(z, data)
    np.testing.assert_allclose(np.asarray(value_new), np.asarray(value), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad_new["beta"]), np.asarray(grad["beta"]), rtol=1e-4, atol=1e-4)
    integers = lambda v: jnp.sum(lax.cumprod(v))  # noqa: E731 - integer reductions are left as they are
    assert rewrites(jax.make_jaxpr(integers)(jnp.arange(1, 5))) == 0


def test_a_model_with_nothing_to_rewrite_gives_bitwise_what_it_gave():
    """No small product, no cumulative reduction: the model's own trace, evaluated as traced
    (the census's 222 such models ran the same iterations to the same means)."""
    counts = jnp.asarray([3.0, 5.0, 4.0, 0.0, 9.0])

    def gamma_poisson(z):
        rate = jnp.exp(z["log_rate"])
        return jnp.sum(counts * z["log_rate"] - rate) + jnp.sum(2.0 * z["log_rate"] - rate)

    z = {"log_rate": jnp.asarray(np.random.default_rng(5).normal(size=(16, 5)), jnp.float32)}
    original = jax.jit(jax.vmap(jax.value_and_grad(gamma_poisson)))(z)
    rewritten = jax.jit(jax.vmap(jax.value_and_grad(cpu_rewritten(gamma_poisson))))(z)
    assert rewrites(jax.make_jaxpr(gamma_poisson)({"log_rate": z["log_rate"][0]})) == 0
    for a, b in zip(jax.tree_util.tree_leaves(original), jax.tree_util.tree_leaves(rewritten), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

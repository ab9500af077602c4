"""``grepvi.inference.zero_products``: a function's jaxpr run again with ``0 * x = 0`` and
``0 / x = 0``, and the widened gradient that uses it where float64 does not mend a gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi.inference.widened_gradient import float64_where_float32_overflows
from grepvi.inference.zero_products import zero_absorbing

DOSES = jnp.array([0.0, 1.0, 3.0, 10.0])


def hill_curve(ed50, hill):
    """``sum (d / ed50)^hill``: at ``d = 0`` and ``hill < 1`` autodiff's ``d/d ed50`` is
    ``inf * 0`` (NaN), though the term is 0 for every ``ed50``."""
    return jnp.sum((DOSES / ed50) ** hill)


def exact_hill_gradient(ed50, hill):
    doses = np.asarray(DOSES, np.float64)
    ratio = (doses / ed50) ** hill
    d_ed50 = np.sum(-hill * ratio / ed50)
    d_hill = np.sum(np.where(doses > 0, ratio * np.log(np.where(doses > 0, doses, 1.0) / ed50), 0.0))
    return d_ed50, d_hill


@pytest.mark.parametrize("hill", [0.3, 0.7])
def test_a_zero_times_infinity_in_the_chain_rule_is_the_flat_terms_zero(hill):
    gradient = jax.grad(hill_curve, argnums=(0, 1))
    plain = gradient(jnp.float32(8.0), jnp.float32(hill))
    assert np.isnan(float(plain[0]))  # the case: autodiff's NaN
    mended = jax.jit(zero_absorbing(gradient))(jnp.float32(8.0), jnp.float32(hill))
    np.testing.assert_allclose([float(g) for g in mended], exact_hill_gradient(8.0, hill), rtol=2e-6)


def _composite(x, y):
    """Products and quotients inside ``jit``, ``scan``, ``while`` and ``cond``."""
    inner = jax.jit(lambda a, b: a * b / (1.0 + b * b))(x, y)
    scanned, _ = jax.lax.scan(lambda c, t: (c * t + x / (t + 2.0), None), y, jnp.linspace(0.5, 1.5, 4))
    looped = jax.lax.fori_loop(0, 3, lambda i, c: c * 0.9 + x * y, x)
    branched = jax.lax.cond(x > 0, lambda: jnp.exp(x) * y, lambda: y / (1.0 + x * x))
    return jnp.sum(inner * jnp.sin(x)) + scanned + looped + branched


def test_where_no_product_has_a_zero_factor_the_numbers_are_the_same():
    gradient = jax.jit(jax.grad(_composite, argnums=(0, 1)))
    mended = jax.jit(zero_absorbing(jax.grad(_composite, argnums=(0, 1))))
    rng = np.random.default_rng(0)
    for x, y in rng.normal(size=(20, 2)).astype(np.float32):
        for plain, ours in zip(gradient(x, y), mended(x, y), strict=True):
            # bitwise here; XLA may fuse the selected products differently elsewhere (an ulp)
            np.testing.assert_allclose(np.asarray(ours), np.asarray(plain), rtol=3e-7, err_msg=str((x, y)))


def test_sub_jaxprs_are_mended_too_and_vmap_composes():
    """``jit``, ``scan``, ``cond`` and ``checkpoint`` bodies, under ``vmap`` and ``jit``."""

    def scanned_curve(ed50, hill):
        total, _ = jax.lax.scan(lambda c, d: (c + (d / ed50) ** hill, None), 0.0, DOSES)
        return jax.lax.cond(hill > 0, lambda: jax.jit(hill_curve)(ed50, hill) + total, lambda: total)

    def remat_curve(ed50, hill):  # a checkpoint's open jaxpr
        return jax.checkpoint(scanned_curve)(ed50, hill) - jax.checkpoint(hill_curve)(ed50, hill)

    gradient = jax.grad(lambda e, h: remat_curve(e, h) + hill_curve(e, h), argnums=(0, 1))
    hills = jnp.array([0.3, 0.5, 0.9], jnp.float32)
    mended = jax.jit(jax.vmap(zero_absorbing(gradient), in_axes=(None, 0)))(jnp.float32(8.0), hills)
    for i, hill in enumerate(np.asarray(hills, np.float64)):
        expected = 2.0 * np.array(exact_hill_gradient(8.0, hill))
        np.testing.assert_allclose([float(mended[0][i]), float(mended[1][i])], expected, rtol=2e-6)


def test_a_zero_tangent_through_sqrt_at_zero_is_zero():
    """``d/dx sqrt(c x^2)`` at ``c = 0``: ``0 / (2 sqrt(0)) = 0 / 0`` (NaN) in autodiff, 0 here."""
    gradient = jax.grad(lambda x, c: jnp.sqrt(c * x * x), argnums=0)
    assert np.isnan(float(gradient(1.5, 0.0)))
    assert float(zero_absorbing(gradient)(1.5, 0.0)) == 0.0
    assert float(zero_absorbing(gradient)(1.5, 4.0)) == pytest.approx(2.0)


def test_the_widened_gradient_mends_what_float64_does_not():
    """The widened gradient (float64 where float32's is not finite) now also takes zero
    products as 0: the Hill curve's NaN in ``ed50`` becomes the exact derivative; a finite
    float32 gradient is kept as it is."""
    widened = float64_where_float32_overflows(lambda z, data: hill_curve(z["ed50"], z["hill"]))
    gradient = jax.jit(jax.grad(lambda z: widened(z, None)))
    for hill in (0.4, 1.7):
        z = {"ed50": jnp.float32(8.0), "hill": jnp.float32(hill)}
        got = gradient(z)
        np.testing.assert_allclose(
            [float(got["ed50"]), float(got["hill"])], exact_hill_gradient(8.0, hill), rtol=2e-6
        )
    plain = jax.grad(lambda z: hill_curve(z["ed50"], z["hill"]))
    z = {"ed50": jnp.float32(8.0), "hill": jnp.float32(1.7)}
    assert np.asarray(gradient(z)["ed50"]).tobytes() == np.asarray(jax.jit(plain)(z)["ed50"]).tobytes()

"""grepvi.threefry: the unrolled Threefry gives jax.random.bits bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi import threefry


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1000), (2, 5, 9), (2, 4, 25_664)])
def test_the_bits_are_jax_random_bits(shape):
    for key in (jax.random.key(3), jax.random.split(jax.random.key(4), 3)[2], jax.random.PRNGKey(5)):
        found = jax.jit(threefry.bits, static_argnums=1)(key, shape)
        expected = jax.random.bits(key, shape, jnp.uint32)
        np.testing.assert_array_equal(np.asarray(found), np.asarray(expected))


def test_the_bits_under_vmap_and_fold_in():
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(6))
    found = jax.vmap(lambda key: threefry.bits(key, (4, 33)))(keys)
    expected = jax.vmap(lambda key: jax.random.bits(key, (4, 33), jnp.uint32))(keys)
    np.testing.assert_array_equal(np.asarray(found), np.asarray(expected))


def test_other_generators_are_passed_to_jax():
    key = jax.random.key(0, impl="rbg")
    assert not threefry.fused(key)
    np.testing.assert_array_equal(
        np.asarray(threefry.bits(key, (100,))), np.asarray(jax.random.bits(key, (100,), jnp.uint32))
    )


def _draws(key):
    first, second = jax.random.split(key)
    keys = jax.random.split(jax.random.fold_in(first, 7), 4)
    return jax.vmap(lambda k: jax.random.normal(k, (3,)))(keys), jax.random.gamma(second, 0.3, (5,))


def _hlo_whiles(lowered) -> int:
    return lowered.as_text().count("stablehlo.while")


def test_the_unrolled_lowering_has_no_loop_and_the_same_bits():
    key = jax.random.key(11)
    rolled = jax.jit(lambda key: _draws(key)).lower(key)  # a new function each: jit caches lowerings
    with threefry.unrolled_lowering():
        unrolled = jax.jit(lambda key: _draws(key)).lower(key)
    again = jax.jit(lambda key: _draws(key)).lower(key)  # the CPU default is back after the block
    if jax.default_backend() == "cpu":
        assert _hlo_whiles(rolled) > _hlo_whiles(unrolled)
        assert _hlo_whiles(again) == _hlo_whiles(rolled)
    for found, expected in zip(unrolled.compile()(key), rolled.compile()(key), strict=True):
        np.testing.assert_array_equal(np.asarray(found), np.asarray(expected))


def test_a_large_hash_keeps_the_rolled_loop():
    """Unrolled, XLA would hash a large array again in every fusion that reads it."""
    key = jax.random.key(2)
    size = threefry.UNROLLED_MAX_WORDS + 1
    with threefry.unrolled_lowering():
        large = jax.jit(lambda key: jax.random.bits(key, (size,))).lower(key)
        small = jax.jit(lambda key: jax.random.bits(key, (size - 1,))).lower(key)
    if jax.default_backend() == "cpu":
        assert _hlo_whiles(large) == 1 and _hlo_whiles(small) == 0


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1, np.int64(12345), np.uint32(9)])
def test_seed_keys_built_in_numpy_are_jaxs(seed):
    """The same key data and random numbers as ``jax.random.key`` / ``PRNGKey``."""
    np.testing.assert_array_equal(threefry.seed_key_data(seed), np.asarray(jax.random.PRNGKey(seed)))
    key = threefry.seed_key(seed)
    expected = jax.random.key(seed)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(expected))
    assert str(jax.random.key_impl(key)) == str(jax.random.key_impl(expected))
    np.testing.assert_array_equal(jax.random.uniform(key, (4,)), jax.random.uniform(expected, (4,)))


def test_seed_keys_outside_the_numpy_range_are_seeded_by_jax():
    """A negative seed (JAX takes it; grepvi's validation does not) and a bool go to JAX."""
    np.testing.assert_array_equal(threefry.seed_key_data(-3), np.asarray(jax.random.PRNGKey(-3)))
    np.testing.assert_array_equal(
        jax.random.key_data(threefry.seed_key(-3)), jax.random.key_data(jax.random.key(-3))
    )
    assert not threefry._seeded_in_numpy(True)
    # JAX's seeding inside a trace (the adapter's model traces take a seed): a traced key, no error
    np.testing.assert_array_equal(jax.jit(lambda: threefry.seed_key_data(-3))(), jax.random.PRNGKey(-3))


def test_seed_keys_do_not_run_jaxs_seeding(monkeypatch):
    """JAX's seeding compiles a program the first time in a process; the NumPy path never calls it."""

    def refused(*args, **kwargs):
        raise AssertionError("JAX's seeding was called")

    key = threefry.seed_key(20261208)
    monkeypatch.setattr(jax.random, "key", refused)
    monkeypatch.setattr(jax.random, "PRNGKey", refused)
    assert np.asarray(jax.random.key_data(threefry.seed_key(20261208))).tolist() == [0, 20261208]
    assert threefry.seed_key_data(5).tolist() == [0, 5]
    assert key.dtype == threefry.seed_key(1).dtype

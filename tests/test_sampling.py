"""Statistical and interface tests of ``grepvi.sampling.log_gamma``.

The statistical tests are probabilistic. For a correct sampler each Kolmogorov-Smirnov check
fails (p <= 1e-3) with probability 1e-3 and each moment check (5 Monte Carlo standard errors,
two-sided) with probability 6e-7, so the 11 KS checks and 18 moment checks below have a joint
false-failure probability of about 1.1%. Every key is fixed, so the outcome is deterministic;
the seeds are the indices of the parameter lists, not chosen to pass. A biased sampler fails:
20,000 draws detect a CDF error of about 0.014 (KS) and a mean shift of 0.035 standard
deviations.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from grepvi import sampling
from grepvi.errors import ConfigError
from grepvi.sampling import log_gamma, log_gamma_reference

NUM_SAMPLES = 20_000
SHAPES = [1e-3, 1e-2, 0.1, 0.5, 1.0, 2.5, 10.0, 100.0, 1e3]
KS_MIN_P_VALUE = 1e-3
MAX_STANDARD_ERRORS = 5.0


def _draw(seed, alpha, **kwargs):
    """``NUM_SAMPLES`` draws of ``log z`` at one shape, as float64 numpy."""
    key = jax.random.fold_in(jax.random.key(20260101), seed)
    log_z = log_gamma(key, jnp.full((NUM_SAMPLES,), alpha, jnp.float32), **kwargs)
    return np.asarray(log_z, np.float64)


def _ks_p_value(log_z, alpha):
    """KS test of ``log z`` against the log-gamma CDF ``P(alpha, e^x)`` (scipy evaluates it
    in log space where ``e^x`` underflows)."""
    return stats.kstest(log_z, stats.loggamma(alpha).cdf).pvalue


@pytest.mark.parametrize("seed, alpha", list(enumerate(SHAPES)))
def test_distribution_matches_scipy(seed, alpha):
    log_z = _draw(seed, alpha)
    assert np.isfinite(log_z).all()
    assert _ks_p_value(log_z, alpha) > KS_MIN_P_VALUE


@pytest.mark.parametrize("seed, alpha", list(enumerate(SHAPES)))
def test_moments_are_polygammas(seed, alpha):
    """``E[log z] = psi(alpha)`` and ``Var[log z] = psi_1(alpha)``, within 5 standard errors.

    The cumulants of ``log z`` are ``kappa_k = psi^(k-1)(alpha)``, so the fourth central
    moment is ``mu_4 = psi_3 + 3 psi_1^2`` and the sample variance has standard error
    ``sqrt((mu_4 - psi_1^2) / n)``.
    """
    log_z = _draw(100 + seed, alpha)
    n = log_z.size
    mean, variance = special.digamma(alpha), special.polygamma(1, alpha)
    fourth_central_moment = special.polygamma(3, alpha) + 3 * variance**2
    mean_standard_error = np.sqrt(variance / n)
    variance_standard_error = np.sqrt((fourth_central_moment - variance**2) / n)
    assert abs(log_z.mean() - mean) < MAX_STANDARD_ERRORS * mean_standard_error
    assert abs(log_z.var(ddof=1) - variance) < MAX_STANDARD_ERRORS * variance_standard_error


@pytest.mark.parametrize("alpha", [1e-4, 1e-3, 1e-2, 0.1])
def test_small_shapes_are_finite_in_float32(alpha):
    log_z = log_gamma(jax.random.key(3), jnp.full((NUM_SAMPLES,), alpha, jnp.float32))
    assert log_z.dtype == jnp.float32
    assert bool(jnp.isfinite(log_z).all())
    if alpha <= 1e-2:
        # z = exp(log z) underflows float32 (below 1.4e-45, log z < -103.3) for a fraction
        # P(alpha, 1.4e-45) ~ (1.4e-45)^alpha of the draws: 36% at 1e-2, 90% at 1e-3.
        assert float(jnp.mean(jnp.exp(log_z) == 0)) > 0.3


def test_distribution_with_several_proposals_per_round():
    """The default gives each pending element one proposal per round (about 0.0484 * 20,000
    = 970 elements at ``alpha = 1`` pending after the first, five rounds); with
    ``num_proposals=4`` the first accepted of four is kept."""
    for seed, alpha in enumerate([1.0, 0.3]):
        log_z = _draw(200 + seed, alpha, num_proposals=4)
        assert _ks_p_value(log_z, alpha) > KS_MIN_P_VALUE


@pytest.mark.parametrize("size", [1, 31, 32, 33, 1000, 40_001])
@pytest.mark.parametrize("fraction", [0.0, 0.03, 0.5, 1.0])
def test_first_pending_is_nonzero_with_a_static_size(size, fraction):
    """The packed-word compaction returns exactly ``jnp.nonzero(size=capacity,
    fill_value=n)`` for any size (not a multiple of 32 included), density and capacity
    (below and above the number of pending elements)."""
    pending = jax.random.uniform(jax.random.key(size), (size,)) < fraction
    for capacity in (1, sampling._capacity(size), size + 5):
        expected = jnp.nonzero(pending, size=capacity, fill_value=size)[0]
        found = jax.jit(sampling._first_pending, static_argnums=1)(pending, capacity)
        np.testing.assert_array_equal(np.asarray(found), np.asarray(expected))


def test_pending_loop_alone_with_overflowing_compaction():
    """All 4,000 elements pending but room for 314 per round: about 14 rounds, each over
    the first pending elements, must still give the right distribution."""
    alphas, num_each = (1.0, 4.0), 2_000
    log_g = sampling._finish_pending(
        jax.random.key(300),
        jnp.repeat(jnp.asarray(alphas, jnp.float32), num_each),
        jnp.full((2 * num_each,), jnp.nan, jnp.float32),
        jnp.ones((2 * num_each,), bool),
        1,
    )
    assert bool(jnp.isfinite(log_g).all())
    for position, alpha in enumerate(alphas):
        draws = np.asarray(log_g[position * num_each : (position + 1) * num_each], np.float64)
        assert _ks_p_value(draws, alpha) > KS_MIN_P_VALUE


def test_reference_sampler_agrees():
    """Two-sample KS between ``log_gamma`` and ``jax.random.loggamma`` at mixed shapes."""
    alpha = jnp.asarray(np.geomspace(0.05, 5.0, 4_000), jnp.float32)
    fast = log_gamma(jax.random.key(5), alpha)
    reference = log_gamma_reference(jax.random.key(6), alpha)
    assert fast.shape == reference.shape == alpha.shape
    assert stats.ks_2samp(np.asarray(fast), np.asarray(reference)).pvalue > KS_MIN_P_VALUE


def test_reproducible_for_a_key_and_different_across_keys():
    first, again, other = _draw(0, 0.7), _draw(0, 0.7), _draw(1, 0.7)
    np.testing.assert_array_equal(first, again)
    assert np.mean(first == other) < 0.01


def test_jit_and_vmap_over_keys_match_separate_calls():
    keys = jax.random.split(jax.random.key(9), 3)
    alpha = jnp.full((NUM_SAMPLES,), 0.7, jnp.float32)
    batched = jax.jit(jax.vmap(lambda key, a: log_gamma(key, a), (0, None)))(keys, alpha)
    separate = jnp.stack([log_gamma(key, alpha) for key in keys])
    # Same draws; XLA may fuse the batched computation differently (last-ulp differences).
    np.testing.assert_allclose(np.asarray(batched), np.asarray(separate), rtol=1e-5, atol=1e-6)


def test_no_gradient_flows_to_the_shape():
    alpha = jnp.full((NUM_SAMPLES,), 0.7, jnp.float32)
    gradient = jax.grad(lambda a: log_gamma(jax.random.key(10), a).sum())(alpha)
    np.testing.assert_array_equal(np.asarray(gradient), np.zeros(NUM_SAMPLES, np.float32))


def test_shapes_dtypes_and_special_values():
    special = jnp.asarray([0.0, -1.0, jnp.nan, jnp.inf, 1e-30, 2.0], jnp.float32)
    alpha = jnp.full((NUM_SAMPLES,), 0.7, jnp.float32).at[:6].set(special)
    values = np.asarray(log_gamma(jax.random.key(11), alpha))
    assert np.isnan(values[:3]).all()
    assert np.isposinf(values[3])
    assert np.isfinite(values[4:]).all()
    # Output shape is sample_shape + shape.shape (traced only, no compilation).
    key = jax.random.key(11)
    assert jax.eval_shape(lambda: log_gamma(key, jnp.ones((2, 3)), (4,))).shape == (4, 2, 3)
    assert jax.eval_shape(lambda: log_gamma(key, 2.0, (4, 5))).shape == (4, 5)
    assert jax.eval_shape(lambda: log_gamma(key, 2.0)).shape == ()
    assert log_gamma(key, jnp.ones((0, 4))).shape == (0, 4)
    with pytest.raises(ConfigError):
        log_gamma(key, alpha, num_proposals=0)
    with pytest.raises(ConfigError):
        log_gamma(key, alpha, dtype=jnp.int32)


def test_float64_under_x64():
    with jax.enable_x64(True):
        alpha = jnp.asarray(np.geomspace(1e-3, 1e3, NUM_SAMPLES))
        log_z = log_gamma(jax.random.key(12), alpha)
        assert log_z.dtype == jnp.float64
        assert bool(jnp.isfinite(log_z).all())
        # Probability integral transform of each draw under its own shape is uniform.
        cdf = stats.loggamma(np.asarray(alpha)).cdf(np.asarray(log_z))
        assert stats.kstest(cdf, "uniform").pvalue > KS_MIN_P_VALUE


@pytest.mark.parametrize("seed, alpha", list(enumerate([0.1, 1.0, 3.0])))
def test_small_arrays_under_vmap(seed, alpha):
    """Calls of at most ``SMALL_SIZE`` elements (here 8, under ``vmap`` as the default
    procedure's averaged draws are) take the loop-free path: KS against scipy, and the same
    draws as separate calls."""
    keys = jax.random.split(jax.random.key(400 + seed), NUM_SAMPLES // 8)
    alphas = jnp.full((8,), alpha, jnp.float32)
    batched = jax.jit(jax.vmap(lambda key: log_gamma(key, alphas)))(keys)
    log_z = np.asarray(batched, np.float64).ravel()
    assert np.isfinite(log_z).all()
    assert _ks_p_value(log_z, alpha) > KS_MIN_P_VALUE
    separate = np.asarray(log_gamma(keys[3], alphas))
    np.testing.assert_allclose(np.asarray(batched[3]), separate, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed, alpha", list(enumerate([0.3, 0.999, 1.0, 1.5, 1.999, 2.0])))
def test_tiny_arrays_at_the_edges_of_their_boosts(seed, alpha):
    """Tiny calls (here 8 elements under ``vmap``) boost every shape below 2 to ``[2, 3)``:
    twice below 1, once from 1 to 2. At and beside each edge the draws pass KS against scipy
    and their mean and variance are ``psi(alpha)`` and ``psi_1(alpha)`` within 5 standard
    errors (a boost's uniform misused shifts the mean by at least ``1 / (alpha + 1)``)."""
    keys = jax.random.split(jax.random.key(700 + seed), NUM_SAMPLES // 8)
    alphas = jnp.full((8,), alpha, jnp.float32)
    assert alphas.size <= sampling.TINY_SIZE
    log_z = np.asarray(jax.jit(jax.vmap(lambda key: log_gamma(key, alphas)))(keys), np.float64).ravel()
    assert np.isfinite(log_z).all()
    assert _ks_p_value(log_z, alpha) > KS_MIN_P_VALUE
    n, variance = log_z.size, special.polygamma(1, alpha)
    fourth_central_moment = special.polygamma(3, alpha) + 3 * variance**2
    assert abs(log_z.mean() - special.digamma(alpha)) < MAX_STANDARD_ERRORS * np.sqrt(variance / n)
    variance_error = np.sqrt((fourth_central_moment - variance**2) / n)
    assert abs(log_z.var(ddof=1) - variance) < MAX_STANDARD_ERRORS * variance_error


@pytest.mark.parametrize("alpha, rate", [(1.0, 0.048332), (2.0, 0.018340)])
def test_rejection_rate_behind_the_tiny_paths_proposals(alpha, rate):
    """The tiny path's fallback (all ``TINY_PROPOSALS`` proposals rejected) has probability
    ``rate^5`` at its worst shape, 2, from the rejection rate of one Marsaglia-Tsang proposal
    (by quadrature: 0.04833 at 1, 0.01834 at 2). Measured over 400,000 proposals, within 5
    binomial standard errors (1.1e-3 at 2: the quadrature's 1's rate there fails by 140 of them)."""
    n = 400_000
    uniforms = sampling._open_uniform(jax.random.key(20261206), (2, n), jnp.float32)
    d = alpha - 1 / 3
    c = 1 / np.sqrt(9 * d)
    _, accepted = sampling._proposal(sampling._normal_from_uniform(uniforms[0]), uniforms[1], d, c)
    rejected = 1 - float(jnp.mean(accepted))
    assert abs(rejected - rate) < MAX_STANDARD_ERRORS * np.sqrt(rate * (1 - rate) / n)
    assert sampling.TINY_PROPOSALS == 5 and 0.018340**sampling.TINY_PROPOSALS < 6e-8


@pytest.mark.parametrize("seed, alpha", list(enumerate([1e-3, 0.1, 1.0, 3.0])))
def test_middle_arrays_one_compacted_round(seed, alpha):
    """Calls of ``TINY_SIZE`` to ``SMALL_SIZE`` elements (here 500, under ``vmap``) take one
    proposal each and one loop-free compacted round for the rejected: KS and the first two
    moments against the log-gamma distribution, over 20,000 draws (two 5-standard-error
    checks; the moments' standard errors as in :func:`test_moments_are_polygammas`)."""
    size = 500
    assert sampling.TINY_SIZE < size <= sampling.SMALL_SIZE
    keys = jax.random.split(jax.random.key(500 + seed), NUM_SAMPLES // size)
    alphas = jnp.full((size,), alpha, jnp.float32)
    batched = jax.jit(jax.vmap(lambda key: log_gamma(key, alphas)))(keys)
    log_z = np.asarray(batched, np.float64).ravel()
    assert np.isfinite(log_z).all()
    assert _ks_p_value(log_z, alpha) > KS_MIN_P_VALUE
    n, variance = log_z.size, special.polygamma(1, alpha)
    mean_error = (log_z.mean() - special.digamma(alpha)) / np.sqrt(variance / n)
    fourth = special.polygamma(3, alpha) + 3 * variance**2
    variance_error = (log_z.var(ddof=1) - variance) / np.sqrt((fourth - variance**2) / n)
    assert abs(mean_error) < MAX_STANDARD_ERRORS and abs(variance_error) < MAX_STANDARD_ERRORS
    separate = np.asarray(log_gamma(keys[3], alphas))
    np.testing.assert_allclose(np.asarray(batched[3]), separate, rtol=1e-5, atol=1e-6)


def test_one_compacted_round_serves_each_pending_element_its_own_draw():
    """Every element pending, twice the round's room: the first ``capacity`` pending elements
    get the first accepted of their 8 proposals (KS per shape over 20,000), the rest ``log d``,
    and elements not pending keep their value."""
    alphas, num_each = (1.0, 4.0), 64
    capacity = 2 * num_each
    alpha = jnp.tile(jnp.repeat(jnp.asarray(alphas, jnp.float32), num_each), 2)  # 256 elements
    pending = jnp.ones(alpha.shape, bool).at[0].set(False)
    log_g = jnp.full(alpha.shape, jnp.nan, jnp.float32).at[0].set(7.0)

    def served(key):
        uniforms = sampling._open_uniform(key, (2 * sampling.SMALL_PROPOSALS, capacity), jnp.float32)
        return sampling._finish_pending_once(uniforms, alpha, log_g, pending)

    out = np.asarray(
        jax.jit(jax.vmap(served))(jax.random.split(jax.random.key(600), NUM_SAMPLES // num_each))
    )
    assert np.all(out[:, 0] == 7.0)
    served_alpha = np.asarray(alpha)[1 : capacity + 1]  # the first `capacity` pending elements
    for shape in alphas:
        draws = out[:, 1 : capacity + 1][:, served_alpha == shape]
        assert _ks_p_value(np.asarray(draws, np.float64).ravel(), shape) > KS_MIN_P_VALUE
    rest = out[:, capacity + 1 :]
    np.testing.assert_allclose(
        rest, np.broadcast_to(np.log(np.asarray(alpha)[capacity + 1 :] - 1 / 3), rest.shape)
    )


def test_small_path_fallback_when_every_proposal_is_rejected():
    """Uniforms just below 1 reject every proposal with ``|x| > 0.04``; the fallback is the
    first proposal with ``v > 0`` (``log d + 3 log1p(c x)``), finite."""
    alpha = jnp.full((3,), 2.0, jnp.float32)
    near_one = jnp.full((8, 3), 1 - 2.0**-24, jnp.float32)
    for_normal = jnp.full((8, 3), 0.9, jnp.float32)  # x = 1.28: rejected at u ~ 1
    log_g = sampling._marsaglia_tsang_from_uniforms(alpha, for_normal, near_one, fallback=True)
    d = 2.0 - 1 / 3
    x = np.sqrt(2) * special.erfinv(2 * 0.9 - 1)
    expected = np.log(d) + 3 * np.log1p(x / np.sqrt(9 * d))
    np.testing.assert_allclose(np.asarray(log_g), expected, rtol=1e-5)


def _gathered_draws(seed):
    """Three requests gathered by ``with_one_gamma_draw`` (two small shapes and a scalar one),
    as float64 numpy, from ``NUM_SAMPLES`` draws each."""
    alphas = (jnp.full((3,), 0.1, jnp.float32), jnp.asarray([2.5, 10.0], jnp.float32), jnp.float32(1.0))

    def fn(key):
        keys = jax.random.split(key, len(alphas))
        return [log_gamma(k, a, (NUM_SAMPLES,)) for k, a in zip(keys, alphas, strict=True)]

    key = jax.random.fold_in(jax.random.key(20261127), seed)
    return alphas, [
        np.asarray(x, np.float64) for x in jax.jit(lambda k: sampling.with_one_gamma_draw(fn, k))(key)
    ]


def test_gathered_draws_have_each_requests_distribution():
    """Each request's slice of the one draw is log-gamma at its own shape: the mean is
    psi(alpha) and the variance psi_1(alpha) within 5 MCSE, and KS accepts, per element."""
    alphas, draws = _gathered_draws(0)
    for alpha, log_z in zip(alphas, draws, strict=True):
        assert log_z.shape == (NUM_SAMPLES, *np.shape(alpha))
        flat_alpha = np.ravel(np.asarray(alpha, np.float64))
        for column, a in zip(log_z.reshape(NUM_SAMPLES, -1).T, flat_alpha, strict=True):
            mean_se = np.sqrt(special.polygamma(1, a) / NUM_SAMPLES)
            assert abs(column.mean() - special.digamma(a)) < MAX_STANDARD_ERRORS * mean_se
            fourth = special.polygamma(3, a) + 3 * special.polygamma(1, a) ** 2  # 4th central moment
            var_se = np.sqrt((fourth - special.polygamma(1, a) ** 2) / NUM_SAMPLES)
            assert abs(column.var() - special.polygamma(1, a)) < MAX_STANDARD_ERRORS * var_se
            assert _ks_p_value(column, a) > KS_MIN_P_VALUE


def test_gathered_draws_are_independent_across_requests_and_elements():
    """No two elements of the one draw are correlated (|r| < 5 / sqrt(n) for every pair)."""
    _, draws = _gathered_draws(1)
    columns = np.concatenate([d.reshape(NUM_SAMPLES, -1) for d in draws], axis=1)
    corr = np.corrcoef(columns.T)
    off_diagonal = corr[~np.eye(corr.shape[0], dtype=bool)]
    assert np.max(np.abs(off_diagonal)) < 5.0 / np.sqrt(NUM_SAMPLES)


def _count_equations(jaxpr, matches) -> int:
    """Equations of a jaxpr for which ``matches(eqn)`` holds, nested programs included (not
    inside a matching equation)."""
    count = 0
    for eqn in jaxpr.eqns:
        if matches(eqn):
            count += 1
            continue
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", None)
            if inner is not None:
                count += _count_equations(getattr(inner, "jaxpr", inner), matches)
    return count


def _bit_draws(jaxpr) -> int:
    """Calls of the bit generator in a jaxpr, nested programs included."""
    return _count_equations(jaxpr, lambda eqn: eqn.primitive.name in ("random_bits", "threefry2x32"))


def test_every_latent_is_drawn_by_one_call_of_the_sampler():
    """A model with two betas and a gamma (five log-gamma requests) calls the bit generator
    once for all of them (one copy of the sampler in the step's program), not five times."""
    from grepvi.estimators.base import sample_standardized
    from grepvi.families.beta import Beta
    from grepvi.families.gamma import Gamma

    families = {"a": Beta(shape=(4,)), "b": Beta(), "c": Gamma(shape=(2,))}
    params = {name: family.init_params(jax.random.key(0)) for name, family in families.items()}
    jaxpr = jax.make_jaxpr(lambda key: sample_standardized(key, params, families))(jax.random.key(1)).jaxpr
    assert _bit_draws(jaxpr) == 1
    one = jax.make_jaxpr(lambda key: log_gamma(key, jnp.ones(3)))(jax.random.key(1)).jaxpr
    assert _bit_draws(one) == 1


@pytest.mark.parametrize("counts", [(2, 3), (3, 2)])
def test_with_one_gamma_draw_refuses_a_function_that_changes_its_calls(counts):
    calls = iter(counts)

    def fn(key):
        return [log_gamma(key, jnp.ones(2)) for _ in range(next(calls))]

    with pytest.raises(RuntimeError, match="different log_gamma calls"):
        sampling.with_one_gamma_draw(fn, jax.random.key(0))


def _sampler_calls(jaxpr) -> int:
    """Calls of the jitted sampler (``_log_gamma``) in a jaxpr, nested programs included."""
    return _count_equations(
        jaxpr, lambda eqn: eqn.primitive.name in ("pjit", "jit") and eqn.params.get("name") == "_log_gamma"
    )


def test_large_requests_are_drawn_alone():
    """Requests over ``GATHERED_SIZE`` elements each draw as they are (a concatenation of the
    Olivetti DEF's shapes made its step 30% slower): with no two small requests,
    ``with_one_gamma_draw(fn, key)`` is ``fn(key)``."""
    large = sampling.GATHERED_SIZE + 1
    shapes = (jnp.full((large,), 0.5, jnp.float32), jnp.full((2, large), 3.0, jnp.float32), jnp.ones(3))

    def fn(key):
        keys = jax.random.split(key, len(shapes))
        return [log_gamma(k, a) for k, a in zip(keys, shapes, strict=True)]

    key = jax.random.key(3)
    for gathered, plain in zip(sampling.with_one_gamma_draw(fn, key), fn(key), strict=True):
        np.testing.assert_array_equal(np.asarray(gathered), np.asarray(plain))


def test_small_requests_beside_large_ones_are_gathered():
    """The DEF's pattern: two latents over ``GATHERED_SIZE`` elements and four under it make
    three copies of the sampler (each copy costs compilation), not six; every request keeps
    its distribution (KS tests against each shape)."""
    large = sampling.GATHERED_SIZE + 1
    alphas = (0.1, 0.3, 1.0, 2.5, 0.1, 4.0)
    sizes = (large, 2_000, 3_000, large, 5_000, 600)
    shapes = tuple(jnp.full((size,), alpha, jnp.float32) for alpha, size in zip(alphas, sizes, strict=True))

    def fn(key):
        keys = jax.random.split(key, len(shapes))
        return [log_gamma(k, a) for k, a in zip(keys, shapes, strict=True)]

    jaxpr = jax.make_jaxpr(lambda key: sampling.with_one_gamma_draw(fn, key))(jax.random.key(0)).jaxpr
    assert _sampler_calls(jaxpr) == 3
    assert _sampler_calls(jax.make_jaxpr(fn)(jax.random.key(0)).jaxpr) == 6
    draws = jax.jit(lambda key: sampling.with_one_gamma_draw(fn, key))(jax.random.key(11))
    for alpha, log_z in zip(alphas, draws, strict=True):
        assert _ks_p_value(np.asarray(log_z, np.float64), alpha) > KS_MIN_P_VALUE

"""Minibatch SVI (grepvi.inference.minibatch): the batch gradient of the globals is unbiased.

Exact enumeration: on a tiny data set, with the same standardized values ``eps`` for every
batch (each batch takes its rows of the locals' draws), the average over all ``C(N, B)``
batches of the globals' G-REP gradient equals the full-data gradient, and each batch's local
gradient equals the full gradient's rows. Deterministic, so no Monte Carlo tolerance.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi.errors import ConfigError
from grepvi.estimators.base import get_estimator
from grepvi.estimators.grep import grep_surrogate
from grepvi.inference.minibatch import batch_data, batch_params, batch_target, init, minibatch_problem, step
from grepvi.models import beta_gamma_mf, sparse_gamma_def
from grepvi.optim.advi import advi_stepsize
from grepvi.target import bind_data


def _models():
    rng = np.random.default_rng(0)
    counts = rng.poisson(2.0, (5, 4)).astype(np.float32)
    binary = (rng.random((5, 6)) < 0.4).astype(np.float32)
    return {
        "sparse_gamma_def": sparse_gamma_def(counts, layer_sizes=(3, 2)),
        "beta_gamma_mf": beta_gamma_mf(binary, 2),
    }


@pytest.mark.parametrize("name", ["sparse_gamma_def", "beta_gamma_mf"])
def test_average_batch_gradient_is_full_gradient(name):
    model = _models()[name]
    batch_size = 2
    problem = minibatch_problem(model, batch_size)
    families = model.latents()
    params = {n: f.init_params(jax.random.key(i)) for i, (n, f) in enumerate(sorted(families.items()))}
    # Any fixed standardized values will do (the identity holds draw by draw); normals avoid
    # compiling the gamma sampler for every latent's shape.
    eps = {
        n: 0.5 * jax.random.normal(jax.random.key(10 + i), f.shape)
        for i, (n, f) in enumerate(sorted(families.items()))
    }
    full_target = bind_data(model.target(families), model.data)
    full_grad = jax.jit(jax.grad(lambda p: grep_surrogate(p, eps, full_target)[0]))(params)

    @jax.jit
    def batch_grad(indices):
        target = bind_data(batch_target(problem), batch_data(problem, model.data, indices))
        batch_eps = {n: e[indices] if n in problem.local_latent_names else e for n, e in eps.items()}
        return jax.grad(lambda p: grep_surrogate(p, batch_eps, target)[0])(
            batch_params(problem, params, indices)
        )

    batches = list(itertools.combinations(range(problem.num_observations), batch_size))
    assert len(batches) == math.comb(5, 2)
    total = None
    for rows in batches:
        indices = jnp.asarray(rows)
        grad = batch_grad(indices)
        globals_ = {n: grad[n] for n in problem.global_latent_names}
        total = globals_ if total is None else jax.tree_util.tree_map(jnp.add, total, globals_)
        for n in problem.local_latent_names:  # the locals' own gradient, scaled by N / B
            for key, value in grad[n].items():
                np.testing.assert_allclose(
                    np.asarray(value) / problem.scale,
                    np.asarray(full_grad[n][key])[list(rows)],
                    rtol=2e-4,
                    atol=1e-4,
                )
    for n in problem.global_latent_names:
        for key, value in total[n].items():
            expected = np.asarray(full_grad[n][key])
            np.testing.assert_allclose(
                np.asarray(value) / len(batches), expected, rtol=2e-4, atol=2e-5 * np.max(np.abs(expected))
            )


def test_step_updates_only_the_batch_rows():
    counts = np.random.default_rng(1).poisson(2.0, (6, 4)).astype(np.float32)
    problem = minibatch_problem(sparse_gamma_def(counts, layer_sizes=(2,)), 2)
    optimizer = advi_stepsize(0.1)
    state = init(jax.random.key(0), problem, optimizer)
    new, info = jax.jit(lambda s, data: step(s, problem, get_estimator("grep"), optimizer, data))(
        state, problem.data
    )
    assert bool(info.finite) and np.isfinite(float(info.elbo))
    rows = set(np.asarray(info.indices).tolist())
    assert len(rows) == 2
    before, after = np.asarray(state.params["z1"]["mean"]), np.asarray(new.params["z1"]["mean"])
    assert set(np.flatnonzero(np.any(after != before, 1)).tolist()) == rows
    assert np.all(np.asarray(new.params["W0"]["mean"]) != np.asarray(state.params["W0"]["mean"]))
    assert int(new.local_opt_state.inner_state[0].count) == 1


def test_bad_batch_size():
    with pytest.raises(ConfigError, match="batch_size"):
        minibatch_problem(_models()["beta_gamma_mf"], 6)


def test_draw_rows_is_a_uniform_subset_without_replacement():
    from grepvi.inference.minibatch import draw_rows

    num_rows, batch_size, draws = 12, 5, 20_000
    rows = np.asarray(
        jax.jit(jax.vmap(lambda k: draw_rows(k, num_rows, batch_size)))(
            jax.random.split(jax.random.key(0), draws)
        )
    )
    assert all(len(set(row)) == batch_size for row in rows.tolist())
    assert rows.min() >= 0 and rows.max() < num_rows
    counts = np.bincount(rows.ravel(), minlength=num_rows)
    p = batch_size / num_rows  # each row's inclusion probability
    se = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(counts - draws * p) < 5 * se), counts


def _def_problem(rows=6, batch_size=2):
    counts = np.random.default_rng(1).poisson(2.0, (rows, 4)).astype(np.float32)
    return minibatch_problem(sparse_gamma_def(counts, layer_sizes=(2,)), batch_size)


def test_one_repeat_is_the_plain_step():
    """The default procedure's step runs its batches in a loop of ``repeats``; one repeat is
    the plain step (the same rows, draws, updates)."""
    problem = _def_problem()
    optimizer = advi_stepsize(0.1)
    state = init(jax.random.key(0), problem, optimizer)
    estimator = get_estimator("grep")
    plain = jax.jit(lambda s, d: step(s, problem, estimator, optimizer, d))(state, problem.data)
    looped = jax.jit(lambda s, d: step(s, problem, estimator, optimizer, d, repeats=jnp.int32(1)))(
        state, problem.data
    )
    np.testing.assert_array_equal(np.asarray(plain[1].indices), np.asarray(looped[1].indices))
    for a, b in zip(
        jax.tree_util.tree_leaves(plain[0].params), jax.tree_util.tree_leaves(looped[0].params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_repeated_batches_are_independent_and_average_the_globals_gradient():
    """``repeats = 4`` batches per step: the globals move by the mean of four independent
    batch gradients, so (plain SGD) the variance of their update over random keys is a
    quarter of one batch's. The gradients' tails are heavier than a normal's (log-normal
    weights), so the sample variances are noisy: at 2,000 keys, five seeds gave ratios
    0.19-0.35; at 4,000 the band is 0.15-0.4. A loop that reused its first batch gives 1, one
    that summed instead of averaging 4."""
    import optax

    counts = np.random.default_rng(1).poisson(2.0, (8, 4)).astype(np.float32)
    model = sparse_gamma_def(counts, layer_sizes=(2,))
    estimator = get_estimator("advi")  # normal draws: light tails, a sample variance to trust
    problem = minibatch_problem(model, 2, estimator.adapt_families(model.latents()))
    optimizer = optax.sgd(1e-4)  # small: a batch's local update barely moves the next batch's gradient
    state = init(jax.random.key(0), problem, optimizer)
    names = problem.global_latent_names

    def update(key, repeats):
        new, _ = step(
            state._replace(rng_key=key), problem, estimator, optimizer, problem.data, repeats=repeats
        )
        moved = [new.params[n][k] - state.params[n][k] for n in names for k in sorted(state.params[n])]
        return jnp.concatenate([m.ravel() for m in moved])

    keys = jax.random.split(jax.random.key(7), 4000)
    spread = {
        r: float(
            np.sum(np.var(np.asarray(jax.jit(jax.vmap(lambda k, r=r: update(k, jnp.int32(r))))(keys)), 0))
        )
        for r in (1, 4)
    }
    assert 0.15 < spread[4] / spread[1] < 0.4, spread


@pytest.mark.slow  # 8 s; the plain step's rows: test_step_updates_only_the_batch_rows
def test_repeated_batches_update_only_their_rows():
    problem = _def_problem(rows=12, batch_size=2)
    optimizer = advi_stepsize(0.1)
    state = init(jax.random.key(3), problem, optimizer)
    new, info = jax.jit(
        lambda s, d: step(s, problem, get_estimator("grep"), optimizer, d, repeats=jnp.int32(3))
    )(state, problem.data)
    assert bool(info.finite)
    before, after = np.asarray(state.params["z1"]["mean"]), np.asarray(new.params["z1"]["mean"])
    changed = set(np.flatnonzero(np.any(after != before, 1)).tolist())
    assert set(np.asarray(info.indices).tolist()) <= changed  # the first batch's rows
    assert 2 < len(changed) <= 6  # three batches of two rows (some may coincide)


def test_batch_size_without_a_model_of_rows_is_refused():
    import grepvi

    with pytest.raises(ConfigError, match="batch_size: minibatch VI needs a model"):
        grepvi.fit(lambda z: -z["r"], {"r": grepvi.Gamma()}, batch_size=2, progress=False)

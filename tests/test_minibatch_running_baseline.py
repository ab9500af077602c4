"""G-REP's running baseline in minibatch VI (``grepvi.inference.minibatch``).

The state the estimator carries is full size; a batch gathers its locals' rows of it (as it
gathers their parameters), estimates with them, advances them by its draws and scatters them
back; the globals' state advances at every batch.

* Unbiased whatever the state holds: on a small sparse gamma DEF at gamma shape 0.5, the mean
  over 40,000 (batch, draw) pairs of the globals' gradient of the carried batch estimate (a
  state of arbitrary offsets) equals the mean of 40,000 full-data G-REP gradients without a
  baseline state, within 5 Monte Carlo standard errors of their difference, element by element
  (a baseline that read the draw fails it: ``test_running_baseline.py``).
* A step moves only its batch's rows of the locals' state, and every global's.
* The default minibatch fit carries the state.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi import numerics
from grepvi.estimators import get_estimator
from grepvi.inference import minibatch
from grepvi.models import sparse_gamma_def
from grepvi.optim.advi import advi_stepsize
from grepvi.target import bind_data

NUM_DRAWS = 40_000
MAX_STANDARD_ERRORS = 5.0


def _model(rows=6):
    counts = np.random.default_rng(1).poisson(2.0, (rows, 4)).astype(np.float32)
    return sparse_gamma_def(counts, layer_sizes=(2,))


def _params(families, shape=0.5):
    """Gamma shape ``shape`` everywhere, means spread over 0.3-3."""
    params = {}
    for index, (name, family) in enumerate(sorted(families.items())):
        size = int(np.prod(family.batch_shape))
        means = np.linspace(0.3, 3.0, size).reshape(family.batch_shape)[:: -1 if index % 2 else 1]
        params[name] = {
            "concentration": numerics.inverse_softplus(jnp.full(family.batch_shape, shape, jnp.float32)),
            "mean": numerics.inverse_softplus(jnp.asarray(means, jnp.float32)),
        }
    return params


def _arbitrary_state(estimator, families):
    state = estimator.carried.init(families)
    rng = np.random.default_rng(7)
    offset = {n: jnp.asarray(rng.normal(0.0, 3.0, v.shape), jnp.float32) for n, v in state.offset.items()}
    square = {n: offset[n] ** 2 + 1.0 for n in offset}
    return state._replace(offset=offset, square=square)


def test_the_carried_batch_estimate_of_the_globals_gradient_is_unbiased():
    model = _model()
    problem = minibatch.minibatch_problem(model, batch_size=2)
    families = model.latents()
    params = _params(families)
    estimator = get_estimator("grep")
    state = _arbitrary_state(estimator, problem.families)
    batch = minibatch.batch_target(problem)

    def carried(key):
        key_rows, key_draw = jax.random.split(key)
        rows = minibatch.draw_rows(key_rows, problem.num_observations, problem.batch_size)
        target = bind_data(batch, minibatch.batch_data(problem, problem.data, rows))
        local = minibatch.gather_rows(state, problem.local_latent_names, rows)
        grad, _, _ = estimator.carried.estimate(
            key_draw, minibatch.batch_params(problem, params, rows), target, local
        )
        return {n: grad[n] for n in problem.global_latent_names}

    full_target = bind_data(model.target(families), model.data)
    plain = get_estimator("grep", baseline="none")

    def full(key):
        grad, _ = plain.estimate(key, params, full_target)
        return {n: grad[n] for n in problem.global_latent_names}

    keys = jax.random.split(jax.random.key(0), NUM_DRAWS)
    batched = jax.jit(jax.vmap(carried))(keys)
    reference = jax.jit(jax.vmap(full))(jax.random.split(jax.random.key(1), NUM_DRAWS))
    worst = 0.0
    for a, b in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(reference), strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        se = np.sqrt(a.var(0) / NUM_DRAWS + b.var(0) / NUM_DRAWS)
        z = np.abs(a.mean(0) - b.mean(0)) / se
        worst = max(worst, float(z.max()))
    assert worst < MAX_STANDARD_ERRORS, worst


def test_a_step_moves_its_batchs_rows_of_the_state_and_the_globals():
    problem = minibatch.minibatch_problem(_model(), 2)
    optimizer = advi_stepsize(0.1)
    estimator = get_estimator("grep")
    state = minibatch.init(jax.random.key(0), problem, optimizer, estimator=estimator)
    assert state.estimator_state is not None
    new, info = jax.jit(lambda s, data: minibatch.step(s, problem, estimator, optimizer, data))(
        state, problem.data
    )
    rows = sorted(set(np.asarray(info.indices).tolist()))
    assert len(rows) == 2
    changed = np.flatnonzero(np.any(np.asarray(new.estimator_state.offset["z1"]) != 0.0, 1))
    assert changed.tolist() == rows
    assert np.all(np.asarray(new.estimator_state.offset["W0"]) != 0.0)
    again, _ = jax.jit(lambda s, data: minibatch.step(s, problem, estimator, optimizer, data))(
        new, problem.data
    )
    assert not np.array_equal(
        np.asarray(again.estimator_state.square["W0"]), np.asarray(new.estimator_state.square["W0"])
    )


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_the_default_minibatch_fit_carries_the_running_baseline():
    model = _model(rows=8)
    result = grepvi.fit(model, batch_size=4, num_steps=300, seed=0, progress=False)
    carried = result.run_state.loop.estimator_state
    assert carried is not None
    assert np.all(np.asarray(carried.square["z1"]) > 0.0)  # every row was in some batch
    assert np.isfinite(result.trace.elbo[-50:]).all()

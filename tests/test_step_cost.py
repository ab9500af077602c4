"""The first draws per step by what a draw costs, and the trust region's clipping reported.

* :func:`grepvi.inference.cost.jaxpr_flops` counts what it says: one per output element of an
  elementwise operation, ``2 m n k`` for a matrix product, a while loop's body once, a
  ``cond``'s costliest branch, a ``scan``'s body times its length (exact counts).
* :func:`grepvi.inference.fitting.draws_per_step`: the cost caps the draws only where a draw
  is expensive; ``setup`` starts an expensive model (a 20,000-row logistic regression) at
  fewer draws than its latent count allows and keeps a cheap conjugate model's 64.
* :func:`grepvi.inference.fitting.affordable_repeats`: the controller repeats an expensive
  step's draws fewer times (a step's draws cost at most ``MAX_STEP_FLOPS`` flops); a cheap
  model's repeats are as before.
* The natural gradient's state says which fraction of the elements its trust region shrank.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import grepvi
from grepvi import testing
from grepvi.families import Gamma, Normal
from grepvi.inference import fitting, rules
from grepvi.inference.cost import jaxpr_flops
from grepvi.optim.natural_gradient import natural_gradient


def _flops(function, *args):
    return jaxpr_flops(jax.make_jaxpr(function)(*args))


def test_elementwise_and_matrix_products_are_counted_as_xla_does():
    x = jnp.ones(100)
    assert _flops(lambda v: v * 2.0, x) == 100
    assert _flops(lambda v: jnp.exp(v) + 1.0, x) == 200
    a, b = jnp.ones((10, 20)), jnp.ones((20, 30))
    assert _flops(lambda p, q: p @ q, a, b) == 2 * 10 * 30 * 20
    assert _flops(lambda v: jnp.sum(v), x) == 100  # a reduction: its input
    assert _flops(lambda v: jnp.reshape(v, (10, 10)).T, x) == 0  # layout is free


def test_iterative_special_functions_count_their_measured_cost():
    """XLA computes the incomplete gamma and beta functions by series in a loop: 64 and 256
    times an ``exp`` per element (``cost.ITERATIVE_COST``); a polynomial one (``lgamma``) is
    one operation, as before."""
    from jax.scipy import special

    x = jnp.full(100, 3.0)
    assert _flops(lambda v: special.gammainc(8.0, v), x) == 64 * 100
    assert _flops(lambda v: special.gammaincc(8.0, v), x) == 64 * 100
    assert _flops(lambda v: special.betainc(2.0, 3.0, v / 4.0), x) == 256 * 100 + 100
    assert _flops(lambda v: special.gammaln(v), x) == 100
    # 400 capped counts' log P(Y >= 8): the first draws fall below the latent rule's 64
    families = {"b": Normal(shape=(3,))}
    rows = jnp.full(400, 3.0)
    flops = _flops(
        jax.value_and_grad(lambda b: jnp.sum(jnp.log(special.gammainc(8.0, jnp.exp(b[0]) + rows)))), x[:3]
    )
    per_draw = fitting.DRAW_FLOPS_PER_MODEL_FLOP * flops
    assert fitting.draws_per_step(families, grepvi.estimators.grep(), per_draw) < 64


def test_loops_count_their_body_once_conds_their_costliest_branch_scans_their_length():
    x = jnp.ones(50)
    body = lambda i, v: v * 2.0 + 1.0  # 100 per run
    dynamic = lambda v, n: jax.lax.fori_loop(0, n, body, v)  # a while loop: its trip count unknown
    assert _flops(dynamic, x, 7) == pytest.approx(100, abs=2)
    assert _flops(lambda v: jax.lax.fori_loop(0, 7, body, v), x) == pytest.approx(700, abs=10)  # a scan
    branches = lambda p, v: jax.lax.cond(p, lambda u: u * 2.0, lambda u: jnp.exp(u) * u + u, v)
    assert _flops(branches, True, x) == 150
    scanned = lambda v: jax.lax.scan(lambda c, _: (c * 2.0, None), v, None, length=4)[0]
    assert _flops(scanned, x) == 4 * 50


def test_the_cost_caps_the_first_draws_only_where_a_draw_is_expensive():
    families = {"rate": Gamma(shape=(2,))}
    estimator = grepvi.estimators.grep()
    assert fitting.draws_per_step(families, estimator) == 64
    assert fitting.draws_per_step(families, estimator, flops_per_draw=1_000.0) == 64
    expensive = fitting.DRAW_FLOPS_PER_STEP / 5.5
    assert fitting.draws_per_step(families, estimator, flops_per_draw=expensive) == 5
    assert fitting.draws_per_step(families, estimator, flops_per_draw=1e12) == 1
    wide = {"w": Normal(shape=(40,))}  # 256 // 40 = 6 element-draws allow; the cost cannot raise it
    assert fitting.draws_per_step(wide, estimator, flops_per_draw=1.0) == 6


def _logistic(rows, features=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-x @ np.full(features, 0.3)))).astype(np.float32)

    def logdensity_fn(z):
        logits = jnp.asarray(x) @ z["w"]
        return jnp.sum(-0.5 * z["w"] ** 2) + jnp.sum(y * logits - jnp.logaddexp(0.0, logits))

    return logdensity_fn, {"w": Normal(shape=(features,))}


def test_setup_starts_an_expensive_model_at_fewer_draws_and_a_cheap_one_as_before():
    estimator = grepvi.estimators.grep()
    logdensity_fn, families = _logistic(20_000)
    target = fitting.make_target(logdensity_fn, families)
    expensive = fitting.setup(target, estimator)
    allowed = fitting.draws_per_step(families, estimator)  # 25 by the latent count alone
    assert allowed == 25 and expensive.plan.base_draws < 4, expensive.plan.base_draws
    model = testing.gamma_poisson()
    cheap = fitting.setup(fitting.make_target(model.logdensity_fn, model.families), estimator)
    assert cheap.plan.base_draws == fitting.draws_per_step(model.families, estimator) == 64


def test_an_expensive_steps_draws_are_repeated_fewer_times():
    """The log-Gaussian Cox process of ``benchmarks/tutorial_models.py`` (0.26 MFLOP a draw,
    4 draws): 16 repeats, not 64; pumps (828 flops, 21 draws): 64 as before."""
    assert fitting.affordable_repeats(64, 4, 258_872.0) == 16
    assert fitting.affordable_repeats(64, 21, 828.0) == 64
    assert fitting.affordable_repeats(64, 1, 1e12) == 2  # the repeats' program kept
    assert fitting.affordable_repeats(1, 1, 1e12) == 1
    assert fitting.affordable_repeats(64, 4, float("nan")) == 64
    estimator = grepvi.estimators.grep()
    logdensity_fn, families = _logistic(20_000)
    expensive = fitting.setup(fitting.make_target(logdensity_fn, families), estimator).plan
    flops = fitting.DRAW_FLOPS_PER_MODEL_FLOP * fitting.model_gradient_flops(
        fitting.make_target(logdensity_fn, families), {"w": {"loc": np.zeros(10, np.float32)}}, None
    )
    uncapped = fitting.max_repeats(families, estimator, expensive.base_draws)
    assert 2 <= expensive.max_repeats < uncapped
    assert expensive.max_repeats * expensive.base_draws * flops <= fitting.MAX_STEP_FLOPS
    model = testing.gamma_poisson()
    cheap = fitting.setup(fitting.make_target(model.logdensity_fn, model.families), estimator).plan
    assert cheap.max_repeats == fitting.max_repeats(model.families, estimator, cheap.base_draws)


def test_the_natural_gradient_reports_the_fraction_of_elements_it_clipped():
    family = Gamma(shape=(4,), init_concentration=60.0, init_mean=20.0)
    params = {"rate": family.init_params()}
    optimizer = natural_gradient({"rate": family}, step_size=1.0, max_kl=0.5)
    state = optimizer.init(params)
    assert float(state.clipped) == 0.0
    grad = {"rate": {"concentration": jnp.array([1e4, 1e-3, -1e4, 1e-3]), "mean": jnp.zeros(4)}}
    _, state = optimizer.update(jax.tree_util.tree_map(jnp.negative, grad), state, params)
    assert float(state.clipped) == pytest.approx(0.5)  # the two large ones of four
    small = jax.tree_util.tree_map(lambda g: 1e-6 * jnp.sign(g), grad)
    _, state = optimizer.update(jax.tree_util.tree_map(jnp.negative, small), state, params)
    assert float(state.clipped) == 0.0


def test_the_switch_reports_the_selected_rules_clipping_and_adam_none():
    family = Gamma(shape=(4,), init_concentration=60.0, init_mean=20.0)
    families = {"rate": family}
    params = {"rate": family.init_params()}
    optimizer = rules.switch([rules.natural_rule(families, 0.5), rules.adam_rule(families)], 0, 1.0)
    state = optimizer.init(params)
    grad = {"rate": {"concentration": jnp.full(4, -1e4), "mean": jnp.zeros(4)}}
    _, natural = optimizer.update(grad, state, params)
    assert float(rules.clipped(natural)) == 1.0
    _, adam = optimizer.update(grad, rules.select(state, 1, 0.1), params)
    assert float(rules.clipped(adam)) == 0.0
    assert rules.clipped(optax.EmptyState()) is None


def test_a_default_fit_runs_the_models_python_three_times():
    """The step is traced once (``state.traced_once``: a jitted function whose trace the
    window's program reuses from JAX's cache) and the model's log density is jitted for the
    step (``fitting.replayed_target``: its baseline at the means and its draws under ``vmap``
    share one trace of the model), so a whole default fit, trial, stages and all, runs the
    user's log density in Python three times: the check's value and gradient at the initial
    point, and once for the step. A second trace of the step would make it four or five (and
    cost 0.2-0.5 s of a small model's time to the answer)."""
    calls = [0]
    counts = jnp.array([3.0, 5.0, 4.0])

    def logdensity_fn(z):
        calls[0] += 1
        rate = z["rate"]
        return jnp.log(rate) - rate + jnp.sum(counts * jnp.log(rate) - rate)

    result = grepvi.fit(logdensity_fn, {"rate": Gamma()}, progress=False)
    assert result.converged
    assert calls[0] == 3


def test_a_step_rebuilt_for_fewer_draws_does_not_run_the_model_again():
    """A model whose draws cost more than ``DRAW_FLOPS_PER_STEP`` allows at the first count
    (a 2,000 x 20 logistic regression: 12 draws by its 21 elements, 2 by its cost) has its
    step built twice; the second build replays the jitted model's trace (three runs in all,
    as where the draws stand)."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2000, 20)), jnp.float32)
    y = jnp.asarray(rng.random(2000) < 0.5, jnp.float32)
    calls = [0]

    def logdensity_fn(z):
        calls[0] += 1
        logits = x @ z["w"] + z["b"]
        prior = -0.5 * jnp.sum(z["w"] ** 2) - 0.5 * z["b"] ** 2
        return prior + jnp.sum(y * logits - jnp.logaddexp(0.0, logits))

    latents = {"w": Normal(shape=(20,)), "b": Normal()}
    first = fitting.draws_per_step(latents, grepvi.get_estimator("grep"))
    prepared = fitting.setup(fitting.make_target(logdensity_fn, latents), grepvi.get_estimator("grep"))
    assert first > prepared.plan.base_draws  # the draws were cut, the step built again
    prepared.window.compile(prepared.initial.loop, prepared.data)
    assert calls[0] == 3

"""A stage that would raise the draws many times over runs again with G-REP's quadratic control
variate instead (``controller._expands``, ``fitting.expandable_estimator``): when, what the
record says, the answer, and a resumed run."""

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import gammaln

import grepvi
from grepvi import Gamma
from grepvi.errors import NotConvergedWarning
from grepvi.inference import controller, fitting, rules

TOLERANCE = 0.005


class _Loop(NamedTuple):
    params: dict
    rng_key: jax.Array


def _first_stage(window_sd, expandable, seed=0, max_repeats=64):
    """Simulated windows (mean iterate 0 plus noise of sd ``window_sd / sqrt(repeats)`` per
    coordinate, the Fisher metric the identity) until the first stage ends: the state then."""
    settings = controller.AdaptiveSettings(tolerance=TOLERANCE)
    loop = _Loop({"x": np.zeros(2, np.float32)}, jax.random.key(0))
    state = controller.init(loop, 1, 0.1)
    kwargs = dict(
        settings=settings,
        candidates=[rules.Candidate("natural", 0, 0.1, linear=True)],
        initial_state=loop,
        select=lambda s, i, rho, repeats=1: s,
        distance=lambda p, d: float(np.sqrt(sum(np.sum(np.square(v)) for v in d.values()))),
        max_repeats=max_repeats,
        expandable=expandable,
    )
    rng = np.random.default_rng(seed)
    for _ in range(500):
        mean = rng.normal(0.0, window_sd / math.sqrt(int(state.repeats)), 2)
        summary = controller.WindowSummary(
            -10.0 + rng.normal(0.0, 0.01, settings.window),
            np.ones(settings.window, bool),
            np.zeros((settings.window, 1), bool),
            {"x": mean},
        )
        state, loop = controller.update(state, summary, loop, **kwargs)
        if int(state.stage) >= 1:
            return state, settings
    raise AssertionError("the first stage never ended")


def test_a_first_stage_that_asks_many_times_its_draws_runs_again_with_the_control_variate():
    """Noisy enough that its error asks at least ``EXPANSION_FACTOR`` times the draws: the
    stage runs again (stage 1, approaching) at its step and draws with the control variate on,
    and the record says so; a quieter first stage raises its draws as before; without a
    program for it (``expandable=False``) the noisy one raises them too."""
    noisy, settings = _first_stage(0.5, expandable=True)
    assert int(noisy.coupled) == controller.EXPANDED
    assert int(noisy.phase) == controller.APPROACH and int(noisy.repeats) == 1
    assert float(noisy.step_size) == pytest.approx(0.1) and not bool(noisy.has_previous)
    record = controller.convergence(noisy, [rules.Candidate("natural", 0, 0.1, linear=True)], settings)
    assert record.control_variate == "quadratic" and "quadratic control variate" in record.summary()
    quiet, _ = _first_stage(0.05, expandable=True)
    assert int(quiet.coupled) != controller.EXPANDED and 1 < int(quiet.repeats) < controller.EXPANSION_FACTOR
    plain, _ = _first_stage(0.5, expandable=False)
    assert int(plain.coupled) != controller.EXPANDED and int(plain.repeats) >= controller.EXPANSION_FACTOR


def test_where_draws_are_cheap_the_first_stage_reruns_only_if_the_draws_cap_cannot_buy_its_ask():
    """``EXPAND_WHERE_CAPPED`` (a model under ``fitting.EXPANSION_MIN_FLOPS`` a draw): a noisy
    first stage (it asks 90 times its draws, over ``EXPANSION_FACTOR``) raises its draws where
    the cap affords more than ``1 / EARLY_FACTOR`` of that (64 repeats), and reruns with the
    control variate where the cap (4) affords less."""
    affordable, _ = _first_stage(0.15, expandable=controller.EXPAND_WHERE_CAPPED)
    assert int(affordable.coupled) != controller.EXPANDED and int(affordable.repeats) == 64
    capped, _ = _first_stage(0.15, expandable=controller.EXPAND_WHERE_CAPPED, max_repeats=4)
    assert int(capped.coupled) == controller.EXPANDED and int(capped.repeats) == 1
    plain, _ = _first_stage(0.15, expandable=False, max_repeats=4)
    assert int(plain.coupled) != controller.EXPANDED and int(plain.repeats) == 4


def test_where_draws_are_dear_a_first_stage_the_draws_cap_binds_reruns_too():
    """``expandable`` True (a model at ``fitting.EXPANSION_MIN_FLOPS`` a draw or more): a first
    stage asking 16 times its draws or more at a cap that affords them reruns with the control
    variate (``_expands``, as before), and so does one whose cap (3, a draw's cost) affords less
    than ``1 / EARLY_FACTOR`` of its ask (``_capped``), where ``repeats x factor`` stops at the
    cap under ``EXPANSION_FACTOR``. A spatial autoregression (``benchmarks/stranger_models.py``'s
    ``sar_spatial``, a 100 x 100 ``slogdet`` a draw) capped at 3 times its draws halved its step
    four times: 70,550 iterations, 72.5 s (NUTS 14.0); rerun with the control variate, 12,750."""
    affordable, _ = _first_stage(0.15, expandable=True)
    assert int(affordable.coupled) == controller.EXPANDED
    capped, _ = _first_stage(0.15, expandable=True, max_repeats=3)
    assert int(capped.coupled) == controller.EXPANDED and int(capped.repeats) == 1
    plain, _ = _first_stage(0.15, expandable=False, max_repeats=3)
    assert int(plain.coupled) != controller.EXPANDED and int(plain.repeats) == 3


@pytest.mark.parametrize(
    ("asked", "room", "stage", "coupled", "expected"),
    [
        (40, 16, 0, -1, True),  # the cap affords 16 of 40: two floors and more at the cap
        (20, 16, 0, -1, False),  # 20 < EARLY_FACTOR x 16: the stage at the cap costs under two floors
        (40, 16, 1, -1, False),  # a later stage raises the draws the cap affords (GARCH, seed 2)
        (40, 16, 0, 1, False),  # coupled locations take the Hessian as their control variate
        (11, 2, 0, -1, True),  # under EXPANSION_FACTOR times its draws, but the cap affords 2
        (10, 1, 0, -1, False),  # a rule whose draws are not raised (Adam), or none left to raise
    ],
)
def test_the_capped_rule(monkeypatch, asked, room, stage, coupled, expected):
    monkeypatch.setattr(controller, "_draws_factor", lambda *args: asked)
    loop = _Loop({"x": np.zeros(2, np.float32)}, jax.random.key(0))
    state = controller.init(loop, 1, 0.1)._replace(stage=np.int32(stage), coupled=np.int32(coupled))
    assert controller._capped(state, 0.1, math.nan, None, room) is expected


# Overdispersed counts (negative binomial, as NumPyro's GammaPoisson): the concentration c and
# rate r of their gamma mixing distribution are strongly correlated a posteriori (the mean is
# c / r), the case the control variate is for.
# (benchmarks/support_models.py's ``gamma_poisson`` counts: negative binomial, 3 successes, p = 0.4)
COUNTS = np.array(
    [5, 2, 3, 2, 8, 5, 1, 4, 7, 3, 5, 8, 0, 6, 6, 2, 3, 2, 5, 1, 3, 5, 1, 12, 1, 0, 3, 7, 7, 9]
    + [3, 2, 5, 5, 2, 0, 5, 6, 3, 4, 1, 8, 5, 9, 7, 5, 4, 6, 9, 1, 3, 1, 6, 0, 7, 2, 5, 0, 5, 7]
    + [7, 5, 0, 1, 0, 4, 1, 6, 0, 8, 2, 2, 2, 1, 1, 5, 1, 4, 0, 6],
    np.float32,
)


def _gamma_poisson(x, y=COUNTS):
    """``log p(c, r, y)`` at ``c = exp(x["c"])``, ``r = exp(x["r"])`` (the log space NumPyro's
    models are fitted in: ``log_space=True``)."""
    c, r = jnp.exp(x["c"]), jnp.exp(x["r"])
    log_normalizer = gammaln(y + c) - gammaln(c) - gammaln(y + 1.0)
    likelihood = log_normalizer + c * (x["r"] - jnp.log1p(r)) - y * jnp.log1p(r)
    prior = -0.5 * c - r  # Exponential(0.5) and Gamma(1, 1)
    return jnp.sum(likelihood) + prior


def _latents():
    return {"c": Gamma(shape=()), "r": Gamma(shape=())}


@pytest.fixture
def uncoupled(monkeypatch):
    """The gamma-Poisson's log-means are coupled by default (``grepvi.optim.coupling``, whose
    Newton step crosses the concentration-rate ridge; ``tests/test_gamma_coupling.py``): here
    the coupling is off, as on a model whose correlated latents it does not cover (beta,
    Dirichlet; a Hawkes process's fit still reruns with the control variate). Its gradient
    costs under 10,000 flops a draw, under ``fitting.EXPANSION_MIN_FLOPS``, where the default
    raises the draws instead (:func:`test_a_model_whose_draws_are_cheap_raises_them_instead`):
    here the floor is 0, to run the rerun on it."""
    monkeypatch.setattr(fitting, "location_coupler", lambda target, data, params=None: None)
    monkeypatch.setattr(fitting, "EXPANSION_MIN_FLOPS", 0)


def test_a_model_whose_draws_are_cheap_raises_them_instead(uncoupled, monkeypatch):
    """The same first stage (it asks many times its draws) reruns with the control variate
    where the model's gradient costs at least ``EXPANSION_MIN_FLOPS`` a draw, and raises its
    draws where it costs less: the gamma-Poisson's costs under 10,000."""
    rerun = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert rerun.convergence.control_variate == "quadratic"
    monkeypatch.setattr(fitting, "EXPANSION_MIN_FLOPS", 10_000)
    raised = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert raised.convergence.converged and raised.convergence.control_variate == ""
    assert raised.convergence.draws > rerun.convergence.draws  # measured: 2,112 draws a step against 704


def test_a_model_whose_draws_are_cheap_reruns_where_the_draws_cap_binds(uncoupled, monkeypatch):
    """Under ``EXPANSION_MIN_FLOPS`` a draw, the gamma-Poisson raises its draws
    (:func:`test_a_model_whose_draws_are_cheap_raises_them_instead`); with a step's flops capped
    (``MAX_STEP_FLOPS``: at most twice its first draws) its first stage asks 11 times its draws,
    more than the cap affords, and reruns with the control variate instead, to a converged
    answer (without the rerun: ``max_draws`` after 44,275 iterations)."""
    monkeypatch.setattr(fitting, "EXPANSION_MIN_FLOPS", 10_000)
    monkeypatch.setattr(fitting, "MAX_STEP_FLOPS", 1)
    capped = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert capped.convergence.converged and capped.convergence.control_variate == "quadratic"


def test_the_rerun_lands_on_the_optimum_the_plain_estimator_finds(uncoupled, monkeypatch):
    """The fit reruns its first stage with the control variate and converges; its answer is
    the plain estimator's (the rerun turned off), both at the same optimum of the ELBO: their
    means within a few of the tolerances they report (each answer's bias up to 2 tolerances by
    the convergence rule), in the q's own standard deviations."""
    result = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert result.convergence.converged and result.convergence.control_variate == "quadratic"
    with monkeypatch.context() as patch:
        patch.setattr(fitting, "EXPANSION_ELEMENTS", 0)
        plain = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert plain.convergence.converged and plain.convergence.control_variate == ""
    monkeypatch.undo()  # the defaults: the log-means coupled, no control variate
    coupled = grepvi.fit(_gamma_poisson, _latents(), progress=False, log_space=True)
    assert coupled.convergence.converged and coupled.convergence.coupled
    assert coupled.convergence.control_variate == ""
    for other in (result, coupled):
        bound = 3 * (other.convergence.accuracy + plain.convergence.accuracy) + 4 * TOLERANCE
        for name in ("c", "r"):
            sd = float(np.sqrt(plain.posterior[name].variance()))
            gap = abs(float(other.posterior[name].mean()) - float(plain.posterior[name].mean())) / sd
            assert gap < bound, (name, gap, bound)
            ratio = float(other.posterior[name].variance()) / float(plain.posterior[name].variance())
            assert abs(ratio - 1.0) < 0.05, (name, ratio)


def test_a_run_resumed_after_the_rerun_is_bitwise_the_uninterrupted_one(uncoupled):
    calls = [0]

    def stop_after_rerun(event):
        calls[0] += 1
        return int(event.run_state.controller.coupled) == controller.EXPANDED and calls[0] >= 30

    kwargs = dict(progress=False, num_steps=20_000, log_space=True)
    full = grepvi.fit(_gamma_poisson, _latents(), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        part = grepvi.fit(_gamma_poisson, _latents(), callback=stop_after_rerun, **kwargs)
    assert part.convergence.reason == "interrupted" and part.convergence.control_variate == "quadratic"
    rest = grepvi.fit(_gamma_poisson, _latents(), resume=part.run_state, **kwargs)
    assert rest.convergence.num_iterations == full.convergence.num_iterations
    assert rest.convergence.accuracy == full.convergence.accuracy and rest.convergence.converged
    for x, y in zip(
        jax.tree_util.tree_leaves(rest.params), jax.tree_util.tree_leaves(full.params), strict=True
    ):
        np.testing.assert_array_equal(x, y)

"""``grepvi.fit``: a mean-field approximation fitted with the defaults, or with a fixed schedule.

Both run through the one loop of :mod:`grepvi.inference.driver`: by default the procedure of
:mod:`grepvi.inference.controller` (a trial of update rules, stages, averaging, a convergence rule)
chooses the rule and step size by setting arrays of the state, so the whole fit is one
compiled program; with ``step_size`` (the paper's Eq. 9) or ``optimizer`` the controller
never changes the step. ``resume`` continues a run from its :class:`~grepvi.inference.driver.RunState`
exactly as if it had not stopped.
"""

import dataclasses
import functools
import math
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from grepvi import validation
from grepvi.errors import ConfigError, NonFiniteStepWarning, NotConvergedWarning, NumericalError
from grepvi.estimators.base import Estimator, get_estimator
from grepvi.families.base import Family, Posterior
from grepvi.inference import controller, driver, rules, stacking
from grepvi.inference.batch_size import resolve_batch_size
from grepvi.inference.compilation_cache import (
    SMALL_MODEL_ELEMENTS,
    enable_persistent_cache,
    hessian_compiler_options,
    once_compiler_options,
    step_compiler_options,
)
from grepvi.inference.controller import AdaptiveSettings, Convergence
from grepvi.inference.cost import SPECIAL_FUNCTIONS, jaxpr_elements, jaxpr_flops, longest_scan
from grepvi.inference.cpu_rewrites import cpu_rewritten
from grepvi.inference.paused_collection import paused_collection
from grepvi.inference.state import (
    StepInfo,
    Trace,
    check_target,
    init,
    initial_params,
    make_target,
    step,
    traced_once,
)
from grepvi.inference.summary import describe, posterior_table
from grepvi.inference.widened_gradient import widened_target
from grepvi.optim import coupling
from grepvi.optim.advi import advi_stepsize
from grepvi.optim.natural_gradient import fisher_mean_quad
from grepvi.target import Target, bind_data, latent_names
from grepvi.threefry import seed_key

__all__ = [
    "FitResult",
    "Setup",
    "fit",
    "setup",
    "draws_per_step",
    "average_estimates",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_FIXED_STEPS",
]

DEFAULT_MAX_STEPS = 200_000
DEFAULT_FIXED_STEPS = 1000


class FitResult(NamedTuple):
    """What :func:`fit` returns.

    Attributes:
      params: the fitted unconstrained parameters (the averaged iterate under the default
        procedure).
      families: each latent's family (ADVI's Gaussians for ``estimator="advi"``).
      posterior: each latent's fitted ``q`` (``mean()``, ``variance()``, ``sample(key, n)``).
      trace: per-iteration ELBO estimates and wall time.
      estimator: the estimator's name.
      state: the last optimizer state (resumable with :func:`step`).
      convergence: how the run ended (``converged``, ``reason``, ``num_iterations``, the
        estimated ``accuracy``, the rule kept and why); see :class:`grepvi.inference.controller.Convergence`.
      run_state: everything the run needs to continue (:class:`grepvi.inference.driver.RunState`):
        ``fit(..., resume=result.run_state)`` with a larger cap goes on as if it had not
        stopped (a converged or drifting run stays as it ended:
        :func:`~grepvi.inference.driver.resumable`). It holds the run's own layout: latents of
        one family with equal options stacked into one in a small model's default procedure
        (:mod:`grepvi.inference.stacking`; not with a user's ``optimizer``, which is built on
        the model's latents; ``params`` and ``state`` are in the model's).
      batch_size: the rows of the data per step (``None``: every row), chosen by
        ``batch_size="auto"`` where not given.
    """

    params: dict
    families: dict
    posterior: dict
    trace: Trace
    estimator: str
    state: Any
    convergence: Convergence | None = None
    run_state: Any = None
    batch_size: int | None = None  # rows per step (None: every row)

    @property
    def num_skipped_steps(self) -> int:
        return int(self.state.num_skipped)

    @property
    def converged(self) -> bool:
        return bool(self.convergence is not None and self.convergence.converged)

    def summary(self, num_draws: int = 1000, seed: int = 0, max_rows: int = 60) -> str:
        """How the run ended and a table of each latent element's ``q``: mean, standard
        deviation, and 5%, 50% and 95% quantiles (exact for the standard families, else of
        ``num_draws`` draws; at most ``max_rows`` rows): ``print(result.summary())``. See
        :func:`grepvi.inference.summary.posterior_table`."""
        return posterior_table(self, num_draws, seed, max_rows)

    def __repr__(self) -> str:  # the state's arrays stay out of it: summary.describe
        return describe(self)


def latent_elements(families: dict) -> int:
    """The number of latent elements of ``families`` (every entry of every latent's array): what
    sizes the draws per step, the tolerance and the compiler options."""
    return sum(math.prod(family.shape) for family in families.values())


def own_draws(estimator: Estimator) -> int:
    """The draws one estimate of ``estimator`` takes (its ``num_samples`` and control samples)."""
    return int(estimator.options.get("num_samples", 1)) + int(estimator.options.get("num_control_samples", 0))


def draws_per_step(families: dict, estimator: Estimator, flops_per_draw: float | None = None) -> int:
    """How many independent gradient estimates the default procedure averages per step at its
    start (the controller raises them between stages where a stage would be long).

    On small models a step costs little more than its fixed costs (the loop, the update), so
    averaging several estimates buys variance reduction almost for free: up to 64, while
    latent elements x the estimator's own draws x this stays within 256; large models get 1.
    Given ``flops_per_draw`` (in :func:`setup`, ``DRAW_FLOPS_PER_MODEL_FLOP`` times the model's
    value and gradient at one point, :func:`model_gradient_flops`), also at most
    ``DRAW_FLOPS_PER_STEP // flops_per_draw``: where one draw is expensive (a 500-row
    negative-binomial regression: 0.18 MFLOP by that count, 36 draws a step cost 27-38 times
    one), the floors of a stage, counted in steps, are what the draws cost; starting it at 5
    cut its time to the answer from 30 to 9 s (``docs/performance.md``). Where a draw is cheap
    the count is the one without the cost: the conjugate cases of
    ``tests/test_default_accuracy.py`` and nine of the twelve textbook models run as before.
    (A flat 8 within 32 was tried in the fourteenth session: at a gamma posterior of shape
    0.1 the natural gradient's trust region clipped 13% of 8-draw steps, the stages' bias no
    longer fell as ``rho / D``, and the answer's variance landed 2.2% off; the controller now
    estimates no bias across a clipped stage: ``controller.MAX_CLIPPED``.)
    """
    elements = latent_elements(families)
    own = own_draws(estimator)
    draws = max(1, min(MAX_FIRST_DRAWS, FIRST_DRAW_ELEMENTS // max(1, elements * own)))
    if flops_per_draw is not None and flops_per_draw > 0 and math.isfinite(flops_per_draw):
        draws = min(draws, max(1, int(DRAW_FLOPS_PER_STEP // flops_per_draw)))
    return int(draws)


def replayed_target(target: Target) -> Target:
    """``target`` with its model functions under :func:`jax.jit`, made once per fit: JAX traces
    each once per argument shapes, and every later call inside a trace (the step's baseline at
    the means and its draws under ``vmap``, the step rebuilt for fewer draws) reuses that
    trace as one call equation (``vmap`` and ``grad`` transform the cached jaxpr) instead of
    running the model's Python again. XLA inlines the call. A default fit runs the model's
    Python three times (the check's value and gradient, the step), where it ran four (six
    where the step was rebuilt: ``tests/test_step_cost.py``); the time saved on the textbook
    models is within the machine's noise (pumps 4.38 -> 4.17 s).

    On CPU the functions are :func:`~grepvi.inference.cpu_rewrites.cpu_rewritten` first: a
    model's products of small matrices and its cumulative reductions other than sums in the
    forms XLA runs fast there (a Kalman filter's fit 12.4 -> 7.6 s)."""
    rewritten = cpu_rewritten if jax.default_backend() == "cpu" else (lambda function: function)
    local = target.local_logdensity_fn
    return target._replace(
        logdensity_fn=jax.jit(rewritten(target.logdensity_fn)),
        local_logdensity_fn=None if local is None else jax.jit(rewritten(local)),
    )


def model_gradient_flops(target: Target, params: dict, data) -> float:
    """:func:`grepvi.inference.cost.jaxpr_flops` of the log joint's value and gradient at one
    point of the latents (their shapes and dtypes from ``params``, a point per family), or NaN
    where the model cannot be traced there (the step's trace then reports why). Shapes only:
    nothing runs; the model's ``jax.jit`` (:func:`replayed_target`) keeps the trace, and the
    step's draws replay it."""
    latents = {
        name: jax.ShapeDtypeStruct(family.shape, jax.tree_util.tree_leaves(params[name])[0].dtype)
        for name, family in target.families.items()
    }

    def value(latents, data):
        return bind_data(target, data).logdensity_fn(latents)

    try:
        return float(jaxpr_flops(jax.make_jaxpr(jax.value_and_grad(value))(latents, data).jaxpr))
    except Exception:  # noqa: BLE001 - the step's trace and the model's check name the failure
        return math.nan


def step_profile(jaxpr) -> dict:
    """What a step's jaxpr holds that sizes its compiler options
    (:func:`grepvi.inference.compilation_cache.step_compiler_options`): ``special_elements``
    (elements of special functions such as ``lgamma``), ``gathered_elements``, ``flops``
    and ``scan_trips``, the longest ``scan`` (:mod:`grepvi.inference.cost`)."""
    return {
        "special_elements": jaxpr_elements(jaxpr, SPECIAL_FUNCTIONS),
        "gathered_elements": jaxpr_elements(jaxpr, {"gather"}),
        "flops": jaxpr_flops(jaxpr),
        "scan_trips": longest_scan(jaxpr),
    }


MAX_FIRST_DRAWS = 64
FIRST_DRAW_ELEMENTS = 256
DRAW_FLOPS_PER_STEP = 2**20  # the draws of a step at the start cost at most this (jaxpr_flops)
# A draw of the step (its sample, the model's value and gradient, G-REP's terms) over the model's
# value and gradient at one point (model_gradient_flops), by jaxpr_flops: 0.94-1.73, median 1.25,
# over the 32 benchmark models whose draws the cost cuts. Counting the model alone sizes the
# draws before the step is traced: one trace of it, where a trace at the first count measured
# the draw and a second followed at fewer (0.1-0.5 s on those models).
DRAW_FLOPS_PER_MODEL_FLOP = 1.25
MAX_DRAW_ELEMENTS = 16_384  # latent elements x draws per step up to which the draws may grow
MAX_REPEATS = 64
# Latent elements up to which a stage that would raise the draws to controller.EXPANSION_FACTOR
# times the first stage's runs again with G-REP's quadratic control variate (controller._expands).
EXPANSION_ELEMENTS = 8
# ... where the model's gradient costs at least this many flops a draw (model_gradient_flops).
# The rerun's second program compiles in 2-5 s; where a draw is cheap, the draws it saves cost
# less. Over the 202 census models and five more (sixty-seventh session, seed 0, one default fit
# each, one core) the rerun fired on four: a Hawkes process (757,000 flops a draw) fitted in 14.3 s
# with it against 18.8 without; a negative-binomial regression of roach counts (100,000) in
# 18.1 against 10.9, GARCH (26,000) in 31.3 against 24.1, six group means under a latent
# ceiling (1,700) in 11.3 against 6.8 (fresh process). The forty-third session's gamma-Poisson
# counts, for which the rerun was built, now take the coupled step (grepvi.optim.coupling).
# Below it the rerun fires only where the draws cap cannot buy the draws a stage asks for
# (controller._capped): the BG/NBD model, 162,000 flops a draw, 75 -> 14 s. (At or above it,
# there too since the seventy-second session: a spatial autoregression capped at 3 times its
# draws, 70,550 -> 12,750 iterations.)
EXPANSION_MIN_FLOPS = 300_000


def max_repeats(families: dict, estimator: Estimator, draws: int) -> int:
    """How many times the default procedure may repeat a step's ``draws`` estimates (it raises
    them between stages: :mod:`grepvi.inference.controller`): up to ``MAX_REPEATS``, while
    (latent elements x the estimator's own draws x ``draws`` x repeats) stays within
    ``MAX_DRAW_ELEMENTS``. Large models get 1 (their step is never repeated, nor looped)."""
    elements = latent_elements(families)
    own = own_draws(estimator)
    return int(max(1, min(MAX_REPEATS, MAX_DRAW_ELEMENTS // max(1, elements * own * draws))))


MAX_STEP_FLOPS = 2**24  # the most a step's draws may cost once the controller repeats them


def affordable_repeats(repeats: int, draws: int, flops_per_draw: float) -> int:
    """``repeats`` (:func:`max_repeats`) capped where a step of ``draws x repeats`` draws would
    cost more than ``MAX_STEP_FLOPS`` (``flops_per_draw``: ``DRAW_FLOPS_PER_MODEL_FLOP`` times
    :func:`model_gradient_flops`); 2 at least where it was more (the program is the same).

    The controller raises the draws where a stage's average needs less noise; where the
    stage's iterates still travel (an ill-conditioned posterior that mean-field steps cross
    slowly), a step of many draws travels no farther than a step of few, and costs its draws.
    A log-Gaussian Cox process (40 bins, its kernel's amplitude and length scale latent: a
    Cholesky factor per draw, 0.26 MFLOP) ran stages at 64 times its 4 draws, 9.7 ms a step,
    and stopped at the draws cap after 25,350 steps (147-200 s; NUTS 27-34 s); at 16 times
    it converged after 34,550 steps in 62 s."""
    if repeats <= 1 or not (flops_per_draw > 0 and math.isfinite(flops_per_draw)):
        return repeats
    return int(max(2, min(repeats, MAX_STEP_FLOPS // (flops_per_draw * draws))))


def _batch_repeats(model, families: dict, estimator: Estimator, draws: int, batch_size: int) -> int:
    """:func:`max_repeats` of a minibatch step (its elements: the globals and ``B`` rows of the
    locals), and at most ``N // B`` batches per step (an effective batch of every row is a
    full-batch step's cost)."""
    from grepvi.inference import minibatch

    problem = minibatch.minibatch_problem(model, batch_size, families)
    per_row = problem.batch_size / problem.num_observations
    batch_families = {
        name: dataclasses.replace(family, shape=(max(1, round(family.shape[0] * per_row)), *family.shape[1:]))
        if name in problem.local_latent_names
        else family
        for name, family in families.items()
    }
    most = max_repeats(batch_families, estimator, draws)
    return int(max(1, min(most, problem.num_observations // problem.batch_size)))


def average_estimates(estimator: Estimator, count: int) -> Estimator:
    """``estimator`` averaged over ``count`` independent calls (itself when ``count == 1``), its
    carried estimate too."""
    from grepvi.estimators.grep import multi_sample, multi_sample_carried

    carried = estimator.carried
    if carried is not None:
        carried = carried._replace(
            estimate=multi_sample_carried(carried.estimate, count, compute_variance=False)
        )
    return estimator._replace(
        estimate=multi_sample(estimator.estimate, count, compute_variance=False), carried=carried
    )


def expandable_estimator(estimator: Estimator, families: dict) -> bool:
    """Whether a default fit may run a stage again with G-REP's quadratic control variate
    (:func:`grepvi.inference.controller.update`'s ``expandable``): G-REP with its running
    baseline and no control variate, on at most ``EXPANSION_ELEMENTS`` latent elements."""
    options = estimator.options
    return (
        estimator.name == "grep"
        and options.get("baseline") == "running"
        and options.get("control_variate", "none") == "none"
        and latent_elements(families) <= EXPANSION_ELEMENTS
    )


def carrying(stepper: Estimator, expanded: Estimator) -> Estimator:
    """``stepper`` whose carried state is ``expanded``'s (its running baseline and the quadratic
    control variate's regression): ``stepper``'s estimate and advance on the baseline, the
    regression passed on untouched (at its initial value until ``expanded`` runs). One loop
    state for both programs: a run that switches keeps its checkpoints' layout."""
    plain = stepper.carried

    def estimate(rng_key, params, target, state):
        return plain.estimate(rng_key, params, target, state[0])

    def advance(state, statistics):
        return plain.advance(state[0], statistics), state[1]

    carried = plain._replace(init=expanded.carried.init, estimate=estimate, advance=advance)
    return stepper._replace(carried=carried)


class Setup(NamedTuple):
    """A run ready for :func:`grepvi.inference.driver.run`: the compiled window, the plan, the initial
    :class:`~grepvi.inference.driver.RunState`, the data, and what the result needs."""

    window: Any
    plan: driver.Plan
    initial: driver.RunState
    data: Any
    target: Target
    estimator: Estimator
    fixed: bool
    widened_window: Any = None  # the window whose gradients are widened where float32 overflows
    batch_size: int | None = None  # rows of the data per step (None: every row)
    expanded_window: Any = None  # the window with G-REP's quadratic control variate (a stage's rerun)

    def run(self, start=None, *, max_steps=None, time_budget=None, observers=()) -> driver.RunState:
        """:func:`grepvi.inference.driver.run` from ``start`` (default the initial state)."""
        start = self.initial if start is None else start
        return driver.run(
            self.window, start, self.plan, data=self.data, max_steps=max_steps, time_budget=time_budget,
            observers=observers, widened_window=self.widened_window,
            expanded_window=self.expanded_window,
        )  # fmt: skip


def _resolve_optimizer(optimizer, step_size):
    if optimizer is not None:
        return optimizer
    return advi_stepsize(learning_rate=validation.positive_float(step_size, "step_size"))


def _fisher_distance(families: dict) -> Callable:
    # run a few times per fit (the controller's accuracy and stage changes): compiled for
    # compile time (0.23-0.28 s with the step's options on Dugongs)
    @functools.partial(jax.jit, compiler_options=once_compiler_options())
    def quad(params, delta):
        return fisher_mean_quad(families, params, delta)

    def distance(params, delta) -> float:
        return float(np.sqrt(max(float(quad(params, delta)), 0.0)))

    return distance


@paused_collection()
def setup(
    target: Target,
    estimator: Estimator,
    *,
    seed: int = 0,
    rng_key=None,
    data=None,
    init_params: dict | None = None,
    step_size: float | None = None,
    optimizer=None,
    settings: AdaptiveSettings | None = None,
    chunk_size: int | None = None,
    max_steps: int | None = None,
    time_budget: float | None = None,
    keep_params: bool = False,
    batch_size: int | None = None,
    model=None,
    check: bool | Callable = True,
    parallel: bool = False,
) -> Setup:
    """The window, plan and initial state of a fit (the default procedure, or a fixed schedule
    with ``step_size`` / ``optimizer``); ``batch_size`` runs minibatch VI over the rows of
    ``model`` (:mod:`grepvi.inference.minibatch`). ``check``: the model checked at the
    initial parameters (:func:`~grepvi.inference.state.check_target`), or a function
    ``check(params, data)`` that checks it."""
    fixed = step_size is not None or optimizer is not None
    settings = settings or AdaptiveSettings()
    if chunk_size is not None:
        settings = settings._replace(window=int(chunk_size))
    if settings.tolerance is None:
        elements = latent_elements(target.families)
        settings = settings._replace(tolerance=controller.default_tolerance(elements))
        if elements >= controller.WIDENED_TOLERANCE_ELEMENTS and settings.coarsest_tolerance is None:
            # the default tolerance, widened by the first stage's noise (controller.sized_tolerance)
            settings = settings._replace(coarsest_tolerance=controller.LARGE_MODEL_TOLERANCE)
    settings = settings.validated()
    if settings.max_draws is None and batch_size is None:  # a minibatch draw sees B of N rows
        settings = settings._replace(max_draws=controller.default_max_draws(settings.tolerance))
    key = seed_key(seed) if rng_key is None else rng_key
    if fixed:
        optimizer = _resolve_optimizer(optimizer, step_size)
        candidates = ()
        length = int(chunk_size or min(100, max_steps or 100))
    else:
        optimizer, candidates = rules.default_candidates(
            target.families, settings.step_size, settings.max_kl, settings.adam_step_size
        )
        draws = draws_per_step(target.families, estimator)
        length = settings.window
    raw_data = data
    step_target = target if batch_size is not None or parallel else replayed_target(target)
    expandable = (
        not fixed and batch_size is None and not parallel and expandable_estimator(estimator, target.families)
    )

    def build(draws, initial=None):
        stepper = estimator if fixed else average_estimates(estimator, draws)
        expanded_stepper = None
        if expandable:  # its state holds the quadratic control variate's too, untouched until used
            quadratic = get_estimator(estimator.name, **{**estimator.options, "control_variate": "quadratic"})
            expanded_stepper = average_estimates(quadratic, draws)
            stepper = carrying(stepper, expanded_stepper)
        most_repeats = 1
        if not fixed and not parallel:
            most_repeats = max_repeats(target.families, estimator, draws)
            if batch_size is not None:  # batches per step: the families' locals count per batch
                most_repeats = 1
                if model is not None:
                    most_repeats = _batch_repeats(model, target.families, estimator, draws, batch_size)
        step_fn, initial_loop, place, data, widened_step_fn = _step_and_state(
            step_target, stepper, optimizer, key, init_params, raw_data, batch_size, parallel, model,
            most_repeats > 1, initial,
        )  # fmt: skip
        expanded_step_fn = None
        if expanded_stepper is not None:
            expanded_step_fn = _plain_step(step_target, expanded_stepper, optimizer, most_repeats > 1)
        return most_repeats, step_fn, initial_loop, place, data, widened_step_fn, expanded_step_fn

    most_repeats, step_fn, initial_loop, place, data, widened_step_fn, expanded_step_fn = build(
        None if fixed else draws
    )

    def checked():
        if callable(check):
            check(initial_loop.params, data)
        elif check:
            check_target(target, initial_loop.params, data)

    elements = latent_elements(target.families)
    cheap_draws = False
    try:
        if not fixed and batch_size is None and not parallel and (draws > 1 or most_repeats > 1):
            # the first draws by what one costs, before the step is traced: one trace of it
            flops = model_gradient_flops(step_target, initial_loop.params, data)
            cheaper = draws_per_step(target.families, estimator, DRAW_FLOPS_PER_MODEL_FLOP * flops)
            if cheaper < draws:
                draws = cheaper
                built = build(draws, initial_loop)
                most_repeats, step_fn, _, place, data, widened_step_fn, expanded_step_fn = built
            most_repeats = affordable_repeats(most_repeats, draws, DRAW_FLOPS_PER_MODEL_FLOP * flops)
            if flops < EXPANSION_MIN_FLOPS:  # more draws cost less than the control variate's program
                cheap_draws = True  # ... where the draws cap affords them
        profile = {}
        if batch_size is None and not parallel and elements <= SMALL_MODEL_ELEMENTS:
            # traced once here, replayed by the window: no second trace
            step_fn, _ = traced_once(step_fn, initial_loop, data)
            profile = step_profile(step_fn.jaxpr)
        compiled_as = dict(
            track_mean=not fixed,
            compiler_options=step_compiler_options(elements, **profile),
            unrolled_threefry=elements <= SMALL_MODEL_ELEMENTS,
            batched_specials=elements <= SMALL_MODEL_ELEMENTS and not parallel,
        )
        window = driver.make_window(step_fn, length, keep_params, **compiled_as)
        if not parallel:  # XLA compiles the window on the other core while the model is checked
            window.compile_in_background(initial_loop, data)
    except Exception:
        checked()  # a model the step cannot trace: the check's error names what is wrong
        raise
    checked()
    widened_window = None
    if widened_step_fn is not None:  # compiled only if a run meets an overflow
        widened_window = driver.make_window(widened_step_fn, length, keep_params, **compiled_as)
    expanded_window = None
    if expanded_step_fn is not None:  # compiled only if a stage runs again with the quadratic control variate
        expanded_window = driver.make_window(expanded_step_fn, length, keep_params, **compiled_as)
    names = latent_names(target)  # the model's (a stacked latent's members)
    if fixed:
        state = controller.init(initial_loop, 1, float("nan"), fixed=True)
        plan = driver.Plan(
            None, (), lambda loop, i, rho, repeats=1: loop, None, initial_loop, length, names, place=place
        )
        initial = driver.RunState(initial_loop, state, np.float64(0.0))
        return Setup(
            window, plan, initial, data, target, estimator, True, widened_window, batch_size, expanded_window
        )
    plan, state, start = _default_plan(
        target, settings, candidates, initial_loop, length, names, place, max_steps, time_budget
    )
    expansion = expanded_window is not None and (controller.EXPAND_WHERE_CAPPED if cheap_draws else True)
    plan = plan._replace(
        max_repeats=most_repeats,
        base_draws=draws,
        num_elements=elements if batch_size is None else 0,
        expandable=expansion,
    )
    if batch_size is None and not parallel and any(c.linear for c in candidates):
        plan = plan._replace(couple=location_coupler(step_target, data, initial_loop.params))
    if batch_size is None and not parallel:
        plan = plan._replace(narrow=start_narrower(target.families, optimizer))
    if window.compiling():  # the controller's Fisher distance compiled while XLA compiles the window
        zeros = jax.tree_util.tree_map(lambda leaf: np.zeros(np.shape(leaf), np.float32), initial_loop.params)
        try:
            plan.distance(zeros, zeros)
        except Exception:  # noqa: BLE001 - a warm-up: the controller's own call reports a failure
            pass
    initial = driver.RunState(start, state, np.float64(0.0))
    return Setup(
        window, plan, initial, data, target, estimator, False, widened_window, batch_size, expanded_window
    )


def start_narrower(families: dict, optimizer):
    """``(loop state, times) -> loop state``: the state with every family's ``q`` narrowed
    ``controller.NARROWING ** times``-fold at the same centre (``Family.narrowed_params``) and
    the rules' state started afresh there (``optimizer.init``, as at the run's start); the state
    itself for ``times = 0``. One small program, compiled at its first call (a run whose trial
    never fails from the families' start never calls it)."""

    @functools.partial(jax.jit, static_argnums=1, compiler_options=once_compiler_options())
    def narrowed(params, times):
        factor = controller.NARROWING**times
        params = {name: families[name].narrowed_params(value, factor) for name, value in params.items()}
        return params, optimizer.init(params)

    def narrow(loop, times):
        if not times:
            return loop
        params, opt_state = narrowed(loop.params, int(times))
        return loop._replace(params=params, opt_state=opt_state)

    return narrow


def location_coupler(target, data, params: dict | None = None):
    """``(loop state) -> loop state or None``: the loop state with the natural rule's
    locations coupled at its parameters (:mod:`grepvi.optim.coupling`; the Hessian's program
    compiled at the first call, or ahead by ``couple.prepare_soon(params)``), or None where they
    are not coupled enough to need it or the model covers too few or too many. None where it
    covers none.

    The controller starts compiling it on a thread of its own once the first stage's error
    says its end will try the coupling (``couple.prepare_soon``,
    :func:`grepvi.inference.controller._prepare_coupling`; the first ``couple`` call waits for
    it): a run whose first stage tries the coupling paused for the Hessian's tracing and
    compilation otherwise (the Poisson mixture 0.9 s, a CAR disease map 0.6, an AR(1) state
    space 0.5); its answer is the same, bitwise (the same program, compiled earlier). Until the
    fifty-fourth session :func:`setup` compiled it beside the window's program for every fit
    with a covered location; with the gammas' log-means covered, and the program an expectation
    over draws, that cost the fits that never couple 0.3-1.0 s. ``couple.mask(loop)``: the
    covered elements a loop state couples; ``couple.gamma_elements``: those that are gammas'.

    ``params``: parameters of the fit's shapes (its initial ones), which size the Hessian's
    cost and so its compiler options (:func:`~grepvi.inference.compilation_cache.hessian_compiler_options`;
    None: the step's options for the model's size)."""
    if not coupling.coupling_size(target.families):
        return None
    covered = coupling.covered_locations(target.families)

    @functools.cache  # made at its first use: a fit that never tries the coupling does not trace it
    def hessian_program():
        flops = math.inf if params is None else model_gradient_flops(target, params, data)
        flops *= coupling.HESSIAN_DRAWS * sum(size for _, size in covered)
        options = hessian_compiler_options(latent_elements(target.families), flops)
        return coupling.location_hessian(target, covered, compiler_options=options)

    def hessian(params, data):
        return hessian_program()(params, data)

    failed = []
    preparing = []  # the thread compiling the Hessian's program ahead, if any

    def couple(loop):
        for thread in preparing:  # its program, not a second compilation of the same one
            thread.join()
        if failed:
            return None
        try:
            draws = coupling.finite_draws(hessian(loop.params, data))
            at, share = coupling.expected_hessian(draws)  # of finite draws: it keeps them all
        except Exception as error:  # a model jax cannot differentiate twice: the run goes on uncoupled
            failed.append(error)
            return None
        matrix, at, mask = coupling.coupling_with_funnels(at, share, covered, target.families, draws)
        return None if matrix is None else rules.couple(loop, matrix, at, mask)

    def prepare(params):
        if failed:
            return
        try:  # the collector not paused here: a fit may return while this thread still runs,
            # and the user's process must not go on with it off (paused_collection is global)
            jax.block_until_ready(hessian(params, data))  # compiled into the jit's own cache
        except Exception as error:  # noqa: BLE001 - as a failing first call: the run goes on uncoupled
            failed.append(error)

    def prepare_in_background(params):
        thread = threading.Thread(target=prepare, args=(params,), name="grepvi-hessian", daemon=False)
        preparing.append(thread)
        thread.start()

    def prepare_soon(params):
        if not preparing and not failed:
            prepare_in_background(params)

    couple.prepare_soon = prepare_soon
    couple.preparing = lambda: bool(preparing or failed)
    couple.uncouple = rules.uncouple
    # the covered elements that are gammas' log-means, and those a loop state couples
    couple.gamma_elements = np.concatenate(
        [np.full(size, coupling.is_gamma(target.families[name])) for name, size in covered]
    )
    couple.mask = lambda loop: np.asarray(rules.first_switch(loop).coupled[2], bool)
    return couple


def _step_and_state(
    target,
    stepper,
    optimizer,
    key,
    init_params,
    data,
    batch_size,
    parallel,
    model,
    repeated=False,
    initial=None,
):
    """``(step_fn, initial loop state, placement or None, data, widened step_fn or None)``: the
    plain step, minibatch VI over ``model``'s rows, or the data-parallel step, and the same
    step with the gradient widened to float64 where float32 overflows (none for the
    data-parallel step). ``repeated``: the plain step averages the number of estimates its
    optimizer state says (:func:`grepvi.inference.rules.repeats`). ``initial``: the plain
    step's initial loop state, where one was made already (it does not depend on the draws)."""
    if batch_size is not None:
        if parallel:
            raise ConfigError(
                "parallel: minibatch VI runs on one device (give batch_size or parallel, not both)"
            )
        step_fn, initial, widened_step_fn = _minibatch_step(
            model, target, stepper, optimizer, batch_size, key, init_params, repeated
        )
        return step_fn, initial, None, data, widened_step_fn
    if parallel:
        return (*_parallel_step(model, target, stepper, optimizer, key, init_params, data), None)

    step_fn = _plain_step(target, stepper, optimizer, repeated)
    widened_step_fn = _plain_step(widened_target(target), stepper, optimizer, repeated)
    if initial is None:
        initial = init(key, target, optimizer, init_params, estimator=stepper)
    return step_fn, initial, None, data, widened_step_fn


def _plain_step(target, stepper, optimizer, repeated: bool):
    """``step_fn(state, data) -> (state, info)``: one step of ``stepper`` on ``target`` (the
    plain step, its widened twin, or the step with G-REP's quadratic control variate); with
    ``repeated``, it averages the number of estimates its optimizer state says
    (:func:`grepvi.inference.rules.repeats`)."""

    def step_fn(state, data):
        repeats = rules.repeats(state.opt_state) if repeated else None
        new_state, info = step(state, target, stepper, optimizer, data, repeats)
        return new_state, with_clipped(info, new_state.opt_state)

    return step_fn


def _default_plan(target, settings, candidates, initial_loop, length, names, place, max_steps, time_budget):
    """The default procedure's plan, controller state and first loop state (the fallback rule
    where too few steps fit a trial)."""
    select = lambda loop, i, rho, repeats=1: rules.select(loop, candidates[i].index, rho, repeats)
    fallback = next(
        (i for i, c in enumerate(candidates) if c.label == f"adam-{settings.adam_step_size:g}"), 0
    )
    distance = _fisher_distance(target.families)
    plan = driver.Plan(settings, candidates, select, distance, initial_loop, length, names, fallback, place)
    steps = driver.trial_steps(settings, length, len(candidates), max_steps, time_budget)
    state = controller.init(initial_loop, len(candidates), candidates[0].step_size, trial_steps=steps)
    if steps != 0 or len(candidates) == 1:
        return plan, state, initial_loop
    trial = state._replace(phase=np.asarray(controller.TRIAL))
    fallback_rho = candidates[fallback].step_size
    state, start = controller.size_trial(trial, 0, fallback, fallback_rho, initial_loop, initial_loop, select)
    return plan, state, start


def with_clipped(info: StepInfo, opt_state) -> StepInfo:
    """``info`` with the extra ``clipped``: the fraction of latent elements whose step the
    selected rule's trust region shrank (:func:`grepvi.inference.rules.clipped`), read by the
    controller (a stage whose average was clipped does not estimate its bias)."""
    clipped = rules.clipped(opt_state)
    if clipped is None:
        return info
    return info._replace(extras={**info.extras, "clipped": clipped})


def _parallel_step(model, target, estimator, optimizer, key, init_params, data):
    """The data-parallel step (:mod:`grepvi.inference.sharding`): rows of the data and of the local
    latents split over every device, the weights replicated (one device: the plain step)."""
    from grepvi.inference import sharding

    if model is None:
        raise ConfigError("parallel: data-parallel VI needs a model built from named-axis factors (its rows)")
    parallel = sharding.data_parallel(target, estimator, optimizer, model)
    initial = parallel.place_state(init(key, target, optimizer, init_params))
    layout = sharding.state_shardings(initial, model.local_latent_names, parallel.mesh)

    def step_fn(state, data):
        new_state, info = step(state, target, estimator, optimizer, data)
        return jax.lax.with_sharding_constraint(new_state, layout), info

    return step_fn, initial, parallel.place_state, parallel.place_data(data)


def _minibatch_step(model, target, estimator, optimizer, batch_size, key, init_params, repeated=False):
    from grepvi.inference import minibatch

    if model is None:
        raise ConfigError(
            "batch_size: minibatch VI needs a model built from named-axis factors "
            "(grepvi.fit(model, batch_size=B) with a grepvi.models.Model, or from_numpyro(...))"
        )
    problem = minibatch.minibatch_problem(model, batch_size, target.families)
    names = sorted(target.families)

    def step_fn_of(widened):
        def step_fn(state, data):
            repeats = rules.repeats(state.global_opt_state) if repeated else None
            new_state, info = minibatch.step(
                state, problem, estimator, optimizer, data, widened=widened, repeats=repeats
            )
            nonfinite = jnp.broadcast_to(jnp.logical_not(info.finite), (len(names),))
            return new_state, with_clipped(
                StepInfo(info.elbo, info.finite, nonfinite, {}), new_state.global_opt_state
            )

        return step_fn

    initial = minibatch.init(key, problem, optimizer, init_params, estimator=estimator)
    return step_fn_of(False), initial, step_fn_of(True)


def fit(
    logdensity_fn: Callable[[dict], jax.Array] | Target,
    latents: dict[str, Family] | None = None,
    estimator: str | Estimator = "grep",
    *,
    num_steps: int | None = None,
    time_budget: float | None = None,
    step_size: float | None = None,
    optimizer: optax.GradientTransformation | None = None,
    tolerance: float | None = None,
    seed: int = 0,
    num_samples: int | None = None,
    local_logdensity_fn: Callable[[dict], dict] | None = None,
    data=None,
    log_space: bool = False,
    init_params: dict | None = None,
    estimator_options: dict | None = None,
    settings: AdaptiveSettings | None = None,
    chunk_size: int | None = None,
    progress: bool | None = None,
    batch_size: int | str | None = "auto",
    parallel: bool = False,
    resume: driver.RunState | None = None,
    callback: Callable[[driver.WindowEvent], bool | None] | None = None,
) -> FitResult:
    """Fits a mean-field variational approximation by stochastic gradient ascent on the ELBO.

    By default (no ``step_size``, no ``optimizer``) the procedure of :mod:`grepvi.inference.controller`
    runs: a short trial of natural-gradient steps (KL trust region) and Adam from the same
    start, the better kept, its iterates averaged once stationary, the step halved in stages,
    until two stages agree within ``tolerance`` posterior standard deviations or a cap is
    reached; ``result.convergence`` says which, and which rule was kept and why. With
    ``step_size`` the paper's schedule (Eq. 9 with that ``eta``) runs for ``num_steps``
    exactly, as in the paper's experiments; with ``optimizer`` that optax optimizer does.

    Args:
      logdensity_fn: ``log p(x, z)`` as a function of a dict of latent arrays, or of
        ``(latents, data)`` when ``data`` is given (a model's ``logdensity_fn``); or a
        :class:`~grepvi.Target` (``model.target()``: the model's log-space factors, its
        families and Markov blankets), then ``latents`` may be left out; or a
        :class:`~grepvi.models.Model` (its target and data).
      latents: each latent's name mapped to its family, e.g.
        ``{"rate": grepvi.Gamma(shape=(3,))}``.
      estimator: a registered name (``grepvi.estimator_names()``) or an ``Estimator``.
      num_steps: the cap on iterations, every step the run applies counted (default procedure;
        default 200,000), or the number of iterations of a fixed schedule (default 1,000).
      time_budget: the cap on wall time in seconds from the call, compilation and the trial
        included (both procedures).
      step_size: ``eta`` of the ADVI step-size sequence (paper Eq. 9): runs that schedule.
      optimizer: any optax transformation (fed the gradient of ``-ELBO``): runs it.
      tolerance: accuracy the default procedure stops at, in posterior standard deviations
        (default: by the model's size, :func:`grepvi.inference.controller.default_tolerance`,
        and from 16 latent elements widened by the first stage's measured noise up to 0.02:
        :func:`grepvi.inference.controller.sized_tolerance`; ``result.convergence.tolerance``
        says what the run used).
      seed: random seed; the same seed gives the same result on the same machine.
      num_samples: Monte Carlo samples per gradient (estimator option).
      local_logdensity_fn: per-element local log joints (Markov blankets), see ``Target``.
      data: a pytree of arrays passed to ``logdensity_fn(latents, data)`` (and to
        ``local_logdensity_fn``); an argument of the compiled steps, never a constant.
      log_space: ``logdensity_fn`` takes every latent in the log space of its support
        (``log z`` for gamma, log-normal and Dirichlet latents, ``logit z`` for beta ones).
      init_params: unconstrained starting parameters (else each family's ``init_params``).
      estimator_options: further options of the estimator.
      settings: all knobs of the default procedure (:class:`grepvi.inference.controller.AdaptiveSettings`).
      chunk_size: iterations per compiled window (default 100).
      progress: show a progress bar (default: when the run may be long).
      batch_size: minibatch VI (Hoffman et al. 2013) with ``batch_size`` rows of the data per
        step (``logdensity_fn`` must be a :class:`~grepvi.models.Model`), under either
        procedure; ``None`` every row; ``"auto"`` (default) every row unless a full-data
        step is large, then a batch sized by the step's cost
        (:mod:`grepvi.inference.batch_size`; ``result.batch_size`` says which).
      parallel: data-parallel VI over every device (:mod:`grepvi.inference.sharding`: rows of the data and
        of the local latents split over a device mesh, weights replicated; one device: the
        plain step). ``logdensity_fn`` must be a :class:`~grepvi.models.Model`.
      resume: a :class:`~grepvi.inference.driver.RunState` (``result.run_state`` of an earlier call with
        the same model and options) to continue from.
      callback: called with a :class:`~grepvi.inference.driver.WindowEvent` after every window; a
        return value of ``True`` stops the run (``reason="interrupted"``, resumable).

    The compiled program is cached on disk (JAX's persistent compilation cache, turned on here
    unless the process configured its own or ``GREPVI_COMPILATION_CACHE=0``): a second fit of
    the same shapes, in this process or a later one, loads it instead of compiling.

    Returns:
      A :class:`FitResult` with ``posterior[name]`` (``mean()``, ``variance()``,
      ``sample(key, n)``), ``params``, ``trace`` (``elbo``, ``wall_time``), ``convergence``
      and ``run_state``.

    Example:
        >>> import jax.numpy as jnp, grepvi
        >>> counts = jnp.array([3.0, 5.0, 4.0])
        >>> def logdensity_fn(z):  # Gamma(2, 1) prior on a Poisson rate
        ...     rate = z["rate"]
        ...     prior = jnp.log(rate) - rate
        ...     return prior + jnp.sum(counts * jnp.log(rate) - rate)
        >>> result = grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma()}, progress=False)
        >>> mean = float(result.posterior["rate"].mean())  # exact: 14 / 4
        >>> result.converged, abs(mean - 3.5) < 0.02 * 3.5  # within 2%, as tested
        (True, True)
    """
    called = time.perf_counter()  # a time budget counts from here (setup and compilation included)
    seed = validation.seed(seed)  # the boundary's checks: errors in grepvi's words
    _use_compilation_cache()
    data = validation.data_pytree(data)
    fixed = step_size is not None or optimizer is not None
    if num_steps is not None:
        num_steps = validation.positive_int(num_steps, "num_steps")
    if time_budget is not None:
        time_budget = validation.positive_float(time_budget, "time_budget")
    if batch_size is not None and not isinstance(batch_size, str):
        batch_size = validation.positive_int(batch_size, "batch_size")
    if fixed and tolerance is not None:
        raise ConfigError(
            "tolerance: applies to the default procedure; with step_size or optimizer the run is a "
            "fixed schedule of num_steps"
        )
    if fixed and settings is not None:
        raise ConfigError("settings: applies to the default procedure, not to a fixed schedule")
    options = dict(estimator_options or {})
    if num_samples is not None:
        options["num_samples"] = num_samples
    estimator = get_estimator(estimator, **options)
    target, model, data = _resolve_target(logdensity_fn, latents, local_logdensity_fn, data, log_space)
    target = target._replace(families=estimator.adapt_families(target.families))
    batch_size = resolve_batch_size(batch_size, model, target.families, estimator, parallel)
    if estimator.options.get("control_variate") == "quadratic" and (batch_size is not None or parallel):
        raise ConfigError(
            "control_variate: 'quadratic' needs full-batch steps on one device; "
            "leave it out with batch_size or parallel"
        )
    if data is not None:
        data = jax.tree_util.tree_map(jnp.asarray, data)
    max_steps = num_steps
    if num_steps is None and time_budget is None:
        max_steps = DEFAULT_FIXED_STEPS if fixed else DEFAULT_MAX_STEPS
    if tolerance is not None:
        settings = (settings or AdaptiveSettings())._replace(tolerance=tolerance)
    original, stacked = target, None
    # small models only: their compile time is what stacking shortens (minibatch and sharded
    # steps slice latents by rows); a user's optimizer is built on the model's own latents
    # (``natural_gradient(families)`` holds one state per latent), so its layout stays
    stackable = batch_size is None and not parallel and optimizer is None
    if stackable and latent_elements(target.families) <= SMALL_MODEL_ELEMENTS:
        stacked = stacking.plan(target.families)
    check = resume is None
    if stacked is not None:
        if check:  # the model's checks on its own latents (errors name them)
            check = functools.partial(_check_unstacked, target, stacked)
        target = stacked.target(target)
        if init_params is not None:
            given = initial_params(None, original.families, init_params)
            init_params = stacked.stack({name: given[name] for name in original.families})
    prepared = setup(
        target,
        estimator,
        seed=seed,
        data=data,
        init_params=init_params,
        step_size=step_size,
        optimizer=optimizer,
        settings=settings,
        chunk_size=chunk_size,
        max_steps=max_steps,
        time_budget=time_budget,
        batch_size=batch_size,
        model=model,
        check=check,
        parallel=parallel,
    )
    start = prepared.initial
    if resume is not None:
        start = driver.resumable(driver.from_storage(prepared.initial, driver.to_storage(resume), "resume"))
    elif time_budget is not None:
        start = _spent_before_run(start, called)
    trace = driver.TraceObserver(latent_names(target), float(start.wall_time))
    observers = [trace] + ([] if callback is None else [_CallbackObserver(callback)])
    if progress if progress is not None else (max_steps is None or max_steps >= 1000):
        observers.append(
            driver.ProgressObserver(max_steps, f"fit[{estimator.name}]", int(start.controller.iterations))
        )
    try:
        final = prepared.run(start, max_steps=max_steps, time_budget=time_budget, observers=observers)
    except NumericalError:
        _warn_skipped(trace, int(trace.arrays().get("iteration", [0])[-1:].sum()), 0, None)
        raise
    return _result(prepared, final, trace, fixed, stacked, original)


def _result(
    prepared: Setup,
    final: driver.RunState,
    trace: driver.TraceObserver,
    fixed: bool,
    stacked: stacking.Stacking | None = None,
    original: Target | None = None,
) -> FitResult:
    """The :class:`FitResult` of a finished run (warning where it did not converge or skipped
    steps); with ``stacked``, its parameters and states in the layout of the ``original``
    target's latents (``run_state`` stays the run's own, for ``resume``)."""
    plan, target = prepared.plan, prepared.target
    convergence = controller.convergence(
        final.controller, plan.candidates, plan.settings, plan.distance, plan.base_draws
    )
    params = controller.answer(final.controller, final.loop, settings=plan.settings)
    arrays = trace.arrays()
    extras = {k: v for k, v in arrays.items() if k not in ("iteration", "wall_time", "elbo")}
    result_trace = Trace(
        elbo=arrays.get("elbo", np.zeros(0)), wall_time=arrays.get("wall_time", np.zeros(0)), extras=extras
    )
    kept = (
        None if fixed or int(final.controller.phase) == controller.TRIAL else int(final.controller.candidate)
    )
    _warn(trace, convergence, prepared.estimator, fixed, kept, arrays)
    state = final.loop._replace(params=params)
    if stacked is not None:
        (params, state), target = _unstacked(stacked, (params, state)), original
    posterior = {name: Posterior(family, params[name]) for name, family in target.families.items()}
    return FitResult(
        params=params,
        families=target.families,
        posterior=posterior,
        trace=result_trace,
        estimator=prepared.estimator.name,
        state=state,
        convergence=convergence,
        run_state=final,
        batch_size=prepared.batch_size,
    )


def _spent_before_run(start: driver.RunState, called: float) -> driver.RunState:
    """``start`` with the seconds since ``fit`` was called as time already spent: a
    ``time_budget`` is wall time from the call, and building the target, the initial state
    and its check took 7-10 s of it on the Olivetti DEF (2 loaded cores), which the run's
    own clock did not see (a 30 s budget ran 37 s)."""
    return start._replace(wall_time=np.float64(time.perf_counter() - called))


def _unstacked(stacked: stacking.Stacking, tree):
    """``stacked.unstack(tree)``, sliced on the host and put back on the default device: no
    program compiled (eager ``jnp`` slices each compile a program; as one compiled program, at
    the end of every fit of a stacked model, it cost 0.1-0.2 s of tracing and compilation
    after the run). A sharded tree (its arrays on several devices) is sliced by one program
    that keeps its placement."""
    if any(
        isinstance(leaf, jax.Array) and len(leaf.sharding.device_set) > 1
        for leaf in jax.tree_util.tree_leaves(tree)
    ):
        return jax.jit(stacked.unstack, compiler_options=once_compiler_options())(tree)
    return jax.device_put(stacked.unstack(tree, on_host=True))


def _check_unstacked(target: Target, stacked: stacking.Stacking, params: dict, data) -> None:
    """:func:`~grepvi.inference.state.check_target` of the model's own ``target`` at stacked
    ``params``."""
    check_target(target, _unstacked(stacked, params), data)


def _resolve_target(logdensity_fn, latents, local_logdensity_fn, data, log_space):
    """``(target, model or None, data)`` from what ``fit`` was given: a function and its
    latents, a :class:`~grepvi.Target`, or a :class:`~grepvi.models.Model`."""
    model = None
    if (
        hasattr(logdensity_fn, "target")
        and hasattr(logdensity_fn, "data")
        and not isinstance(logdensity_fn, Target)
    ):
        model = logdensity_fn
        data = model.data if data is None else data
        logdensity_fn = model.target(dict(latents) if latents is not None else None)
        latents = None
    if isinstance(logdensity_fn, Target):
        target = logdensity_fn
        if latents is not None:
            target = target._replace(families=dict(latents))
        if target.takes_data and data is None:
            raise ConfigError("data: this target takes (latents, data); pass data= (e.g. model.data)")
    else:
        target = make_target(
            logdensity_fn, latents, local_logdensity_fn, takes_data=data is not None, log_space=log_space
        )
    return target, model, data


def _use_compilation_cache() -> None:
    """JAX's persistent compilation cache, unless the user configured one or disabled it
    (``GREPVI_COMPILATION_CACHE=0``): a second fit of the same shapes, in this process or
    another, loads its program instead of compiling it."""
    if jax.config.jax_compilation_cache_dir:
        return
    try:
        enable_persistent_cache()
    except ConfigError:
        pass  # no writable cache folder: every fit compiles


class _CallbackObserver:
    def __init__(self, callback):
        self.callback = callback
        self.stop = False

    def on_window(self, event):
        if self.callback(event) is True:
            self.stop = True

    def should_stop(self) -> bool:
        return self.stop


def _warn_skipped(trace: driver.TraceObserver, iterations: int, restarts: int, kept: int | None) -> None:
    """NonFiniteStepWarning for the skipped steps of the answer's path (a dropped trial
    candidate's skipped steps, e.g. Adam at rate 1 diverging, are not the answer's)."""
    skipped, latents = trace.skipped_on_path(kept)
    if skipped:
        warnings.warn(
            f"{skipped} of {iterations} step(s) skipped: non-finite gradient for "
            f"latent(s) {latents} (the parameters were left as they were; the step size was "
            f"halved {restarts} time(s) after falls)",
            NonFiniteStepWarning,
            stacklevel=4,
        )


def _warn_unusable(arrays: dict) -> None:
    """NonFiniteStepWarning for the draws left out of their steps' averages
    (:func:`grepvi.estimators.grep._mean_of_draws`: a non-finite log density or gradient in a
    corner of ``q``) in the steps the answer averages or a fixed schedule ran: how many steps
    had them and what share of their draws. Left out on the way there (a broad ``q`` at the
    start reaching where float32 overflows), they do not bear on the answer."""
    share = arrays.get("unusable_draws")
    if share is None or not np.any(share > 0):
        return
    answer = np.ones(share.shape, bool)
    if "phase" in arrays:
        phases = [controller.PHASES.index("average"), controller.PHASES.index("fixed")]
        answer = np.isin(arrays["phase"], phases)
    steps = share[answer & (share > 0)]
    if steps.size:
        warnings.warn(
            f"{steps.size} step(s) left some gradient draws out of their average (at most "
            f"{steps.max():.0%} of a step's draws, {steps.mean():.1%} on average): the model's log density "
            "or its gradient was not finite there (float32 overflow in the tails of q, or a "
            "jnp.where whose branch not taken is infinite: its gradient is NaN). The answer "
            "stands if q's mass is away from there; a model that stays finite (clip, or the "
            "double-where trick) avoids it",
            NonFiniteStepWarning,
            stacklevel=4,
        )


def _bias_dominates(convergence: Convergence) -> bool:
    """Whether a stopped run's estimated stage bias exceeds its answer's Monte Carlo error."""
    bias, error = convergence.stage_bias, convergence.monte_carlo_error
    return math.isfinite(bias) and not (math.isfinite(error) and bias <= error)


def _warn(
    trace: driver.TraceObserver,
    convergence: Convergence,
    estimator: Estimator,
    fixed: bool,
    kept: int | None,
    arrays: dict,
) -> None:
    """The run's warnings; ``arrays``: the trace's columns (``trace.arrays()``, concatenated once)."""
    _warn_skipped(trace, convergence.num_iterations, convergence.restarts, kept)
    _warn_unusable(arrays)
    if not fixed and not convergence.converged and convergence.reason != "interrupted":
        skipped = trace.skipped_on_path(kept)[0]
        skipped_note = f"; {skipped} step(s) had a non-finite gradient and were skipped" if skipped else ""
        remedy = "Raise num_steps or time_budget, or loosen tolerance."
        if convergence.reason == "max_draws":
            remedy = (
                "The run spent its draws (AdaptiveSettings.max_draws, by default 128 / tolerance^2) "
                "without its average settling: raise max_draws, or loosen tolerance."
            )
        if convergence.reason == "drifting":
            remedy = (
                "The average's Monte Carlo error fell far slower than its draws predict: it drifts "
                "(a direction of the posterior the mean-field q cannot settle on, e.g. a product of "
                "latents identified only as a whole); the answer is the current stage's average. "
                "Reparameterize that part of the model (e.g. a non-centred form), or loosen tolerance."
            )
        if convergence.error_latent:
            remedy = (
                f"{convergence.error_share:.0%} of the answer's Monte Carlo error is in the q of "
                f"{convergence.error_latent!r}. {remedy}"
            )
        if convergence.change_latent and _bias_dominates(convergence):
            remedy = (
                f"The answer's error is mostly its stages' drift: {convergence.change_share:.0%} of "
                f"the change between the last two stages' averages is in the q of "
                f"{convergence.change_latent!r}, which still moves as the step shrinks (a ridge, "
                "or a scale whose q shrinks towards 0 as a centred hierarchy's can; a non-centred "
                f"form of that part may settle). {remedy}"
            )
        warnings.warn(
            f"fit[{estimator.name}] stopped before converging: {convergence.summary()}{skipped_note}. "
            f"{convergence.trial_note}. {remedy}",
            NotConvergedWarning,
            stacklevel=3,
        )

"""The one loop every entry point runs: compiled windows of steps, a controller, observers.

``grepvi.fit`` (default procedure or a fixed schedule), the command line's runs, the held-out
refit and ``from_numpyro(...).fit()`` all run :func:`run`:

* a **window** (:func:`make_window`): one compiled program ``(state, data, active) ->
  (state, mean iterate, per-step outputs)`` that applies ``active`` steps of
  ``step_fn(state, data)`` (a ``lax.fori_loop`` with a dynamic trip count: a shorter window
  costs proportionally less and needs no other program; the data is an argument, never a
  constant);
* the **controller** (:mod:`grepvi.inference.controller`): pure state updated after every window, that
  chooses the rule and step size by setting arrays of the state (one compilation per fit);
* **observers**: the trace, the progress bar, checkpoints and signals, each an object with
  ``on_window(event)`` (and optionally ``should_stop()`` and ``on_end(event)``).

Everything a run needs to continue is :class:`RunState` (loop state, controller state, wall
time spent): checkpoint it after any window, pass it back as ``resume``, and the run goes on
exactly as if it had not stopped (bitwise, on the same machine, when the windows are not
sized by the clock: a ``time_budget`` makes the last window's length depend on time).

Caps, defined once: ``max_steps`` counts every step the run applied (the trial's candidates
included), ``time_budget`` is wall time from the start of :func:`run` plus the ``wall_time``
of a resumed state, compilation and the trial included; what observers do after a window
(held-out evaluation, checkpoints) is excluded from the budget.
"""

import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import threefry
from grepvi.errors import ConfigError, NumericalError
from grepvi.inference import controller, special_batches
from grepvi.inference.controller import ControllerState, WindowSummary
from grepvi.inference.paused_collection import paused_collection
from grepvi.inference.state import traced_once

__all__ = [
    "RunState",
    "WindowEvent",
    "Plan",
    "make_window",
    "run",
    "TraceObserver",
    "ProgressObserver",
    "to_storage",
    "resumable",
    "from_storage",
]

PROBE_STEPS = 1  # timed steps that size the trial to its time limit (a NIPS BBVI step: 20 s)
# A one-step probe of a small model measured 25 ms against 0.6 ms a step after it (the
# program's first run): where the budget leaves room, ten more steps are timed, and they size
# the trial.
SECOND_PROBE_STEPS = 10


class RunState(NamedTuple):
    """Everything a run needs to continue: the loop's state, the controller's, and the
    seconds of wall time already spent."""

    loop: Any
    controller: ControllerState
    wall_time: Any  # float64 0-d array


class WindowEvent(NamedTuple):
    """What observers see after every window.

    ``first_iteration``: iterations before the window; ``outputs``: per-step ``elbo``,
    ``finite``, ``nonfinite_latents``, scalar ``extras`` (and ``params`` with
    ``keep_params``); ``run_state``: the state to continue from; ``previous_loop``: the loop
    state the window started from; ``wall_time``: seconds since the run's start (resumed
    runs included); ``phase``: ``"trial"``, ``"approach"``, ``"average"`` or ``"fixed"``.
    """

    first_iteration: int
    outputs: dict
    run_state: RunState
    previous_loop: Any
    wall_time: float
    window_seconds: float
    phase: str
    step_size: float
    accuracy: float
    label: str
    rule: int = 0


class Plan(NamedTuple):
    """The static parts of a run: the procedure's settings and candidates, how to set a rule
    in a loop state (``select(loop, candidate, step_size, repeats=1)``), the Fisher-metric
    distance, the start every candidate shares."""

    settings: controller.AdaptiveSettings | None
    candidates: Sequence
    select: Callable
    distance: Callable | None
    initial_state: Any
    window: int
    latent_names: tuple = ()
    fallback: int = 0
    place: Callable | None = None  # lays a loop state out over a device mesh (data parallel)
    max_repeats: int = 1  # the most repeats of a step's gradient estimates the controller may set
    base_draws: int = 1  # gradient estimates in one repeat
    num_elements: int = 0  # latent elements (0: unknown; no stage ends before its tolerance)
    couple: Callable | None = None  # couples the natural rule's locations (controller.update's couple)
    expandable: bool | str = False  # a stage may run again with the quadratic control variate (controller)
    narrow: Callable | None = None  # the start with q narrowed (controller.update's narrow)


def make_window(
    step_fn: Callable,
    length: int,
    keep_params: bool = False,
    track_mean: bool = True,
    compiler_options: dict | None = None,
    unrolled_threefry: bool = False,
    batched_specials: bool = False,
):
    """The compiled window of up to ``length`` steps of ``step_fn(state, data) -> (state, info)``.

    ``info`` has ``elbo``, ``finite``, ``nonfinite_latents`` and ``extras`` (scalars kept).
    Returns ``window(state, data, active)`` with ``window.length``, ``window.compile(state,
    data)`` (ahead of time; the first call then runs without compiling). Without
    ``track_mean`` (a fixed schedule, which averages nothing) the mean returned is the last
    iterate and the window does no extra work per step. ``compiler_options``: XLA options of
    the ahead-of-time compilation (:func:`grepvi.inference.compilation_cache.step_compiler_options`:
    a small model's window compiles in half the time). ``unrolled_threefry``: the window is
    lowered with Threefry's rounds unrolled on CPU (:func:`grepvi.threefry.unrolled_lowering`:
    the same bits, a fusion or two per hash instead of a loop of 5 trips): a small model's
    step 20-60% faster, a large model's slower (the Olivetti DEF's window 81 -> 139 ms a step:
    its hashes, fused into their readers, computed again in each), so
    :func:`grepvi.inference.fitting.setup` asks for it up to ``SMALL_MODEL_ELEMENTS`` latent
    elements, as for the compiler options. ``batched_specials``: the step's special functions
    (``lgamma``, grepvi's polygamma series) evaluated one call per function and level
    (:mod:`grepvi.inference.special_batches`: the nested betas' window compiled in 4.1 s
    where it took 10.7), asked for on the same models (a large model's calls are data-sized,
    left as they are, and batching them made the Olivetti DEF's step 1.7 times slower).
    """

    def one_step(state, data):
        new_state, info = step_fn(state, data)
        extras = {key: value for key, value in info.extras.items() if jnp.ndim(value) == 0}
        out = {
            "elbo": info.elbo,
            "finite": info.finite,
            "nonfinite_latents": info.nonfinite_latents,
            "extras": extras,
        }
        if keep_params:
            out["params"] = state.params
        return new_state, out

    def program(state, data, active):
        active = jnp.clip(jnp.asarray(active, jnp.int32), 0, length)
        stepped = special_batches.batched_special_functions(one_step) if batched_specials else one_step
        traced_step, shapes = traced_once(stepped, state, data)
        buffers = jax.tree_util.tree_map(lambda s: jnp.zeros((length, *s.shape), s.dtype), shapes[1])
        zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params) if track_mean else ()

        def body(index, carry):
            state, total, buffers = carry
            state, out = traced_step(state, data)
            if track_mean:
                total = jax.tree_util.tree_map(jnp.add, total, state.params)
            buffers = jax.tree_util.tree_map(lambda b, v: b.at[index].set(v), buffers, out)
            return state, total, buffers

        state, total, outputs = jax.lax.fori_loop(0, active, body, (state, zeros, buffers))
        if not track_mean:
            return state, state.params, outputs
        mean = jax.tree_util.tree_map(lambda t: t / jnp.maximum(active, 1).astype(t.dtype), total)
        return state, mean, outputs

    jitted = jax.jit(program)
    compiled = {}  # signature -> compiled program, or a Future of one (compiling in the background)

    def lowering():
        return threefry.unrolled_lowering() if unrolled_threefry else contextlib.nullcontext()

    def ready(key):
        if isinstance(compiled[key], concurrent.futures.Future):
            compiled[key] = compiled[key].result()  # the background compilation's error, if any
        return compiled[key]

    def window(state, data, active):
        key = _signature(state, data)
        if key in compiled:
            return ready(key)(state, data, np.int32(active))
        with lowering(), paused_collection():  # lowered (and compiled) at its first call
            return jitted(state, data, np.int32(active))

    def lowered_at(state, data):
        with lowering(), paused_collection():
            return jitted.lower(state, data, np.int32(length))

    def compile_ahead(state, data):
        key = _signature(state, data)
        if key not in compiled:
            compiled[key] = lowered_at(state, data).compile(compiler_options or None)
        return ready(key)

    def compile_in_background(state, data):
        key = _signature(state, data)
        if key not in compiled:
            compiled[key] = _compile_in_thread(lowered_at(state, data), compiler_options or None)

    def compiling():
        return any(isinstance(c, concurrent.futures.Future) and not c.done() for c in compiled.values())

    window.length = length
    window.compile = compile_ahead
    window.compile_in_background = compile_in_background
    window.compiling = compiling  # a background compilation still running
    window.jitted = jitted
    window.num_compiled = lambda: len(compiled)
    return window


def _compile_in_thread(lowered, compiler_options) -> concurrent.futures.Future:
    """``lowered.compile(compiler_options)`` on a thread of its own: XLA releases the GIL while
    it compiles, so the caller's Python (a model's checks, the controller's set-up) runs on the
    other core meanwhile. The Future holds the compiled program or the compiler's error. Not
    a daemon: a process that ends while XLA compiles (the model's check raised) waits for it,
    where a daemon thread inside XLA at the interpreter's exit aborted the process (SIGABRT,
    "FATAL: exception not rethrown") after the error was printed."""
    future = concurrent.futures.Future()

    def work():
        try:
            future.set_result(lowered.compile(compiler_options))
        except BaseException as error:  # noqa: BLE001 - raised where the program is wanted
            future.set_exception(error)

    threading.Thread(target=work, name="grepvi-compile", daemon=False).start()
    return future


def _signature(*trees):
    leaves, treedef = jax.tree_util.tree_flatten(trees)
    return treedef, tuple((np.shape(leaf), str(getattr(leaf, "dtype", type(leaf)))) for leaf in leaves)


def _host_outputs(outputs: dict, active: int) -> dict:
    """The first ``active`` rows of the window's per-step outputs, as NumPy arrays."""
    host = {}
    for key, value in outputs.items():
        if key == "extras":
            host[key] = {k: np.asarray(v)[:active] for k, v in value.items()}
        elif key == "params":
            host[key] = jax.tree_util.tree_map(lambda leaf: leaf[:active], value)
        else:
            host[key] = np.asarray(value)[:active]
    return host


def run(
    window,
    run_state: RunState,
    plan: Plan,
    *,
    data=None,
    max_steps: int | None = None,
    time_budget: float | None = None,
    observers: Sequence = (),
    clock: Callable[[], float] = time.perf_counter,
    widened_window=None,
    expanded_window=None,
) -> RunState:
    """Runs windows from ``run_state`` until the controller converges or a cap is reached.

    ``widened_window``: the same window with the gradient widened to float64 where float32
    overflows (:mod:`grepvi.inference.widened_gradient`), compiled only for a run that needs
    it. The first window (not a later trial candidate's) with enough non-finite gradients
    under finite ELBO estimates (:func:`_widening_pays`: a tenth of its steps, or a hundredth
    of the run's) is run again
    with it; where that skips fewer steps, every later window is widened too, else the
    float32 window's outputs stand and it is not tried again (the controller's ``widened``: 1
    or -1, checkpointed). A widened window is bitwise the float32 one at every step whose
    gradient was finite.

    ``expanded_window``: the same window with G-REP's quadratic control variate, for every
    window from the controller's rerun of a stage with it on (its ``coupled`` at
    ``controller.EXPANDED``); compiled there.

    Returns the final :class:`RunState` (its controller's ``reason`` says why it stopped).
    """
    if max_steps is None and time_budget is None and not observers:
        raise ConfigError("give max_steps or time_budget (or an observer that stops the run)")
    start = clock() - float(run_state.wall_time)
    loop, state = run_state.loop, run_state.controller
    place = plan.place or (lambda tree: tree)
    loop = place(loop)
    plain = window
    window = _window_for(state, plain, widened_window, expanded_window)
    window.compile(loop, data)
    window(loop, data, 0)  # the first call's own costs (allocation, dispatch) off the probe
    per_step = None  # seconds per step of the last window, per repeat of its estimates
    while not int(state.reason):
        chosen = _window_for(state, plain, widened_window, expanded_window)
        if chosen is not window:
            window = chosen
            window.compile(loop, data)
            per_step = None  # another program: its cost a step is not the last window's
        elapsed = clock() - start
        reason = _cap_reached(state, max_steps, time_budget, elapsed, observers, plan)
        probing = int(state.phase) == controller.TRIAL and int(state.trial_steps) < 0
        step_seconds = None if per_step is None else per_step * int(state.repeats)
        active = _window_length(state, plan, probing, max_steps, time_budget, elapsed, step_seconds)
        if reason or active == 0:
            state = controller.finish(state, reason or "time_budget")
            break
        window_start = clock()
        new_loop, mean, outputs = window(loop, data, active)
        outputs = _host_outputs(outputs, active)  # waits for the window
        if _may_widen(state, widened_window) and _widening_pays(outputs, new_loop):
            widened_window.compile(loop, data)
            again_start = clock()
            again_loop, again_mean, again_outputs = widened_window(loop, data, active)
            again_outputs = _host_outputs(again_outputs, active)
            helped = _nonfinite_steps(again_outputs) < _nonfinite_steps(outputs)
            state = state._replace(widened=np.asarray(1 if helped else -1, np.int64))
            if helped:  # the widened window's outputs stand, and it runs from now on
                new_loop, mean, outputs = again_loop, again_mean, again_outputs
                window, window_start = widened_window, again_start
        seconds = clock() - window_start
        per_step = seconds / active / int(state.repeats)
        ran = _Ran(
            int(state.iterations),
            int(state.phase),
            float(state.step_size),
            _label(plan, state),
            int(state.candidate),
        )
        summary = WindowSummary(
            outputs["elbo"],
            outputs["finite"],
            outputs["nonfinite_latents"],
            mean,
            outputs["extras"].get("clipped"),
        )
        try:
            state, next_loop = _decide(state, summary, new_loop, plan)
        except NumericalError:  # the run stalled: observers (not checkpoints) see the window
            stalled = RunState(loop, state, np.float64(clock() - start))
            _notify(observers, _event(ran, outputs, stalled, loop, seconds), skip=StallAware)
            raise
        if probing:
            state, next_loop = _size_trial(
                state, next_loop, plan, time_budget, max_steps, clock() - start, per_step * int(state.repeats)
            )
        wall = clock() - start
        _notify(observers, _event(ran, outputs, RunState(next_loop, state, np.float64(wall)), loop, seconds))
        start += (clock() - start) - wall  # what observers did is not the run's time
        loop = place(next_loop) if next_loop is not new_loop else next_loop
    final = RunState(loop, state, np.float64(clock() - start))
    for observer in observers:
        if hasattr(observer, "on_end"):
            observer.on_end(final)
    return final


def _window_for(state, plain, widened_window, expanded_window):
    """The window the next steps run: the widened one once it has helped, else the expanded
    one once the controller turned the quadratic control variate on, else the plain one."""
    if widened_window is not None and int(state.widened) == 1:
        return widened_window
    if expanded_window is not None and int(state.coupled) == controller.EXPANDED:
        return expanded_window
    return plain


def _may_widen(state, widened_window) -> bool:
    """Not tried yet, and the window is not a later trial candidate's: the first candidate
    starts where the model does, a later one may diverge by design (Adam at rate 1 on the
    zoo's clotting model skipped 94 trial steps that float64 did not mend, and trying cost
    2 s of compilation in a 2.6 s fit)."""
    if widened_window is None or int(state.widened) != 0:
        return False
    return int(state.phase) != controller.TRIAL or int(state.candidate) == 0


WIDEN_WINDOW_FRACTION = 0.1  # of a window's steps non-finite: its gradient is widened
WIDEN_RUN_FRACTION = 0.01  # of the run's steps skipped (and WIDEN_RUN_STEPS at least): widened too
WIDEN_RUN_STEPS = 20


def _widening_pays(outputs, loop) -> bool:
    """Whether a window's non-finite steps are many enough to compile the widened window
    (1.5-3 s on a small model): ``WIDEN_WINDOW_FRACTION`` of the window's steps, or the run's
    skipped steps at ``WIDEN_RUN_FRACTION`` of its steps (``WIDEN_RUN_STEPS`` at least). A
    rare non-finite step is skipped, as before, at no cost: a stochastic-volatility series
    (Student-t returns) had one in its first window of 75 and ten in 14,350 steps; widening
    compiled for 2.1 s of a 7 s fit and mended none. The overflow the widened gradient exists
    for is not rare: 192 of 200 gradient draws of a small DEF of shape 0.05.

    Only steps whose ELBO estimate is finite count (:func:`_mendable_steps`): the widened
    gradient mends a backward pass that overflows under a finite value, not a value that is
    itself infinite. Over the 153 benchmark models two windows ever asked for widening: the
    Emax curve's (75 non-finite steps of 75, every ELBO finite; widening mended them) and the
    Gompertz survival model's (33 of 75, every one's ELBO ``-inf``: its start's
    ``exp(eta t)`` overflows; widening mended none and cost 1.5 s of a 5.0 s fit)."""
    mendable = _mendable_steps(outputs)
    if not mendable:
        return False
    if mendable >= WIDEN_WINDOW_FRACTION * len(outputs["finite"]):
        return True
    skipped, steps = int(loop.num_skipped), int(loop.iteration)
    return skipped >= max(WIDEN_RUN_STEPS, WIDEN_RUN_FRACTION * steps)


def _nonfinite_steps(outputs) -> int:
    """Steps of a window whose gradient had a non-finite component."""
    return int(_nonfinite_flags(outputs).sum())


def _mendable_steps(outputs) -> int:
    """Steps of a window whose gradient had a non-finite component under a finite ELBO
    estimate: those the widened gradient may mend."""
    return int((_nonfinite_flags(outputs) & np.isfinite(np.asarray(outputs["elbo"]))).sum())


def _nonfinite_flags(outputs) -> np.ndarray:
    return np.asarray(outputs["nonfinite_latents"]).reshape(len(outputs["finite"]), -1).any(-1)


class _Ran(NamedTuple):
    """What a window ran: its first iteration, phase, step size and rule (label, candidate)."""

    first: int
    phase: int
    step_size: float
    label: str
    rule: int


def _window_length(state, plan, probing, max_steps, time_budget, elapsed, per_step) -> int:
    """Steps of the next window: the probe, the controller's length, clipped to what fits the
    time budget (0: the budget is spent; a run does at least one step)."""
    if probing:
        active = PROBE_STEPS if int(state.trial_done) == 0 else SECOND_PROBE_STEPS
        if max_steps is not None:
            active = max(min(active, max_steps - int(state.iterations)), 0)
    else:
        active = controller.next_window_length(state, plan.window, max_steps)
    if time_budget is not None and per_step is not None:
        fits = math.floor((time_budget - elapsed) / per_step)
        if fits < 1 and int(state.iterations) > 0:
            return 0
        active = min(active, max(fits, 1))
    return active


def _decide(state, summary, new_loop, plan):
    return controller.update(
        state,
        summary,
        new_loop,
        settings=plan.settings,
        candidates=plan.candidates,
        initial_state=plan.initial_state,
        select=plan.select,
        distance=plan.distance,
        latent_names=plan.latent_names,
        max_repeats=plan.max_repeats,
        num_elements=plan.num_elements,
        couple=plan.couple,
        expandable=plan.expandable,
        narrow=plan.narrow,
    )


def _event(ran: _Ran, outputs, run_state: RunState, previous_loop, seconds: float) -> WindowEvent:
    return WindowEvent(
        first_iteration=ran.first,
        outputs=outputs,
        run_state=run_state,
        previous_loop=previous_loop,
        wall_time=float(run_state.wall_time),
        window_seconds=seconds,
        phase=controller.PHASES[ran.phase],
        step_size=ran.step_size,
        accuracy=float(run_state.controller.accuracy),
        label=ran.label,
        rule=ran.rule,
    )


def _notify(observers, event: WindowEvent, skip: type | None = None) -> None:
    for observer in observers:
        if skip is None or not isinstance(observer, skip):
            observer.on_window(event)


class StallAware:
    """An observer that must not see the window of a stalled run (checkpoints: the stalled
    run's last good state is written by the caller)."""


def _label(plan: Plan, state: ControllerState) -> str:
    if not plan.candidates:
        return ""
    return plan.candidates[int(state.candidate)].label


def _cap_reached(state, max_steps, time_budget, elapsed, observers, plan=None) -> str | None:
    if max_steps is not None and int(state.iterations) >= max_steps:
        return "max_steps"
    settings = None if plan is None else plan.settings
    if settings is not None and settings.max_draws is not None:
        if int(state.estimates) * int(plan.base_draws) >= settings.max_draws:
            return "max_draws"
    if time_budget is not None and elapsed >= time_budget and int(state.iterations) > 0:
        return "time_budget"
    if any(getattr(observer, "should_stop", lambda: False)() for observer in observers):
        return "interrupted"
    return None


def _size_trial(state, loop, plan, time_budget, max_steps, elapsed, per_step):
    """After the probe: as many trial steps per candidate as fit ``TRIAL_FRACTION`` of the
    budget left after compilation (and the cap), at most ``trial_windows`` windows. (Of the
    whole budget, a compilation longer than that share skipped the trial: the Olivetti DEF on
    a GPU compiles in 22 s, and ``time_budget=100`` ran the fallback rule untried.)"""
    steps = plan.settings.trial_windows * plan.window
    count = len(plan.candidates)
    if max_steps is not None:
        steps = min(steps, max_steps // (2 * count))
    if time_budget is not None:
        room = controller.TRIAL_FRACTION * (time_budget - elapsed)
        if int(state.trial_done) <= PROBE_STEPS and SECOND_PROBE_STEPS * per_step <= 0.5 * room:
            # a one-step probe carries the program's first run (Mendel's Dirichlet: 8 ms
            # against 0.2 ms a step, a trial of 43 steps instead of 300): ten more are timed
            return state, loop
        done = int(state.trial_done)  # the probes' steps are the first candidate's trial steps
        steps = min(steps, math.floor((room + done * per_step) / (per_step * count)))
    fallback = plan.candidates[plan.fallback]
    return controller.size_trial(
        state, steps, plan.fallback, fallback.step_size, loop, plan.initial_state, plan.select
    )


FINAL_REASONS = ("converged", "drifting")  # a verdict on the run, not a cap: a resume keeps it


def resumable(run_state: RunState) -> RunState:
    """A stored run state ready to continue: a run stopped by a cap or an interruption goes
    on; one that ended with a verdict (``FINAL_REASONS``: converged, or its average seen to
    drift) stays as it ended, so resuming it gives the same answer. Until the fifty-sixth
    session a ``drifting`` run went on: a resumed horseshoe regression ran one more window
    (4,150 -> 4,250 iterations), stopped ``drifting`` again and answered with another
    average."""
    reason = controller.REASONS[int(run_state.controller.reason)]
    if reason in FINAL_REASONS:
        return run_state
    return run_state._replace(controller=run_state.controller._replace(reason=np.asarray(0, np.int64)))


def trial_steps(settings, window: int, num_candidates: int, max_steps: int | None, time_budget) -> int:
    """Steps per candidate known before the run (``-1``: a timed probe sizes it)."""
    if num_candidates <= 1:
        return 0
    if time_budget is not None:
        return -1
    steps = settings.trial_windows * window
    if max_steps is not None:
        steps = min(steps, max_steps // (2 * num_candidates))
    return steps if steps >= controller.MIN_TRIAL_STEPS else 0


# --- observers ------------------------------------------------------------------------------------


class TraceObserver:
    """Collects the trace: per-iteration ELBO, wall time (interpolated within a window),
    skipped steps, step size, phase (0 trial, 1 approach, 2 average, 3 fixed), the first
    iteration of the step's window, the rule (the candidate's index: during the trial each
    candidate starts again from the same point), and the estimator's scalar extras; counts skipped steps
    and the latents that caused them."""

    def __init__(self, latent_names: Sequence[str] = (), initial_wall_time: float = 0.0):
        self.names = tuple(latent_names)
        self.columns: dict[str, list] = {}
        self.skipped = 0
        self.bad = np.zeros(len(self.names), bool)
        # the trial's candidates, by rule: a dropped candidate's skipped steps are not the answer's
        self.trial_skipped: dict[int, int] = {}
        self.trial_bad: dict[int, np.ndarray] = {}
        self._path_bad = np.zeros(len(self.names), bool)
        self.last_wall = float(initial_wall_time)

    def rows(self, event: WindowEvent) -> dict:
        out = event.outputs
        n = np.asarray(out["elbo"]).size
        wall = self.last_wall + (event.wall_time - self.last_wall) * np.arange(1, n + 1) / max(n, 1)
        self.last_wall = event.wall_time
        rows = {
            "iteration": np.arange(
                event.first_iteration + 1, event.first_iteration + n + 1, dtype=np.float64
            ),
            "wall_time": wall,
            "elbo": np.asarray(out["elbo"], np.float64),
            "skipped": 1.0 - np.asarray(out["finite"], np.float64),
            "step_size": np.full(n, event.step_size),
            "phase": np.full(n, float(controller.PHASES.index(event.phase))),
            "window_start": np.full(n, float(event.first_iteration + 1)),
            "rule": np.full(n, float(event.rule)),
        }
        for key, value in out.get("extras", {}).items():
            rows[key] = np.asarray(value, np.float64)
        return rows

    def on_window(self, event: WindowEvent) -> None:
        rows = self.rows(event)
        for key, value in rows.items():
            self.columns.setdefault(key, []).append(value)
        finite = np.asarray(event.outputs["finite"], bool)
        self.skipped += int((~finite).sum())
        bad = np.asarray(event.outputs["nonfinite_latents"], bool)
        latents = np.zeros(len(self.names), bool)
        if bad.size and self.names:
            latents = bad.reshape(finite.size, -1).any(0)[: len(self.names)]
            self.bad |= latents
        if event.phase != "trial":
            self._path_bad |= latents
        else:
            rule = int(event.rule)
            self.trial_skipped[rule] = self.trial_skipped.get(rule, 0) + int((~finite).sum())
            self.trial_bad[rule] = self.trial_bad.get(rule, np.zeros(len(self.names), bool)) | latents

    def skipped_on_path(self, kept: int | None) -> tuple[int, list[str]]:
        """Skipped steps and their latents on the answer's path: every step but those of the
        trial's dropped candidates (``kept``: the kept candidate; None: every step)."""
        if kept is None:
            return self.skipped, self.bad_latents()
        dropped = [rule for rule in self.trial_skipped if rule != kept]
        skipped = self.skipped - sum(self.trial_skipped[rule] for rule in dropped)
        if not dropped:
            return skipped, self.bad_latents()
        # the latents of the path: the steps outside the trial and the kept candidate's
        path = self._path_bad | self.trial_bad.get(kept, np.zeros(len(self.names), bool))
        return skipped, [name for name, flag in zip(self.names, path, strict=True) if flag]

    def arrays(self) -> dict:
        return {key: np.concatenate(parts) for key, parts in self.columns.items()}

    def bad_latents(self) -> list[str]:
        return [name for name, flag in zip(self.names, self.bad, strict=True) if flag]


class ProgressObserver:
    """A progress bar of iterations with the ELBO, phase, step size and accuracy
    (:func:`grepvi.progress.progress_bar`: not on a terminal, at most one line every few
    seconds, so a log grows with time, not speed)."""

    def __init__(self, total: int | None, description: str, initial: int = 0):
        from grepvi.progress import progress_bar

        self.bar = progress_bar(total, initial=initial, description=description, leave=False)
        self.description = description

    def on_window(self, event: WindowEvent) -> None:
        elbo = np.asarray(event.outputs["elbo"], np.float64)
        finite = elbo[np.isfinite(elbo)]
        label = f"{self.description} {event.phase}" + (f" {event.label}" if event.phase == "trial" else "")
        self.bar.set_description_str(label, refresh=False)
        self.bar.set_postfix(
            elbo=f"{np.median(finite):.5g}" if finite.size else "nan",
            rho=f"{event.step_size:.3g}",
            acc=f"{event.accuracy:.2g}",
            time=f"{event.wall_time:.0f}s",
            refresh=False,
        )
        self.bar.update(event.first_iteration + elbo.size - self.bar.n)

    def on_end(self, final) -> None:
        self.bar.close()


def leading_axis(tree):
    """``tree`` with a leading axis of one (a single iteration's parameters)."""
    return jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf)[None], tree)


# --- storage --------------------------------------------------------------------------------------


def _is_key(leaf) -> bool:
    return hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def to_storage(tree) -> list[np.ndarray]:
    """The leaves of ``tree`` as NumPy arrays (random keys as their raw key data)."""
    return [
        np.asarray(jax.random.key_data(leaf)) if _is_key(leaf) else np.asarray(leaf)
        for leaf in jax.tree_util.tree_leaves(tree)
    ]


def from_storage(template, leaves: Sequence[np.ndarray], source: str = "checkpoint"):
    """``leaves`` put back into the structure of ``template`` (a fresh state of the same
    configuration), keys re-wrapped; a :class:`ConfigError` when they do not fit."""
    mine, treedef = jax.tree_util.tree_flatten(template)
    if len(mine) != len(leaves):
        raise ConfigError(
            f"{source}: holds {len(leaves)} arrays, this configuration needs {len(mine)}; it was "
            "written by a different model, estimator or procedure, or by a grepvi that laid the "
            "latents out otherwise (latents of one family are one array of the step: "
            "grepvi.inference.stacking); start the run afresh"
        )
    restored = []
    for index, (ours, theirs) in enumerate(zip(mine, leaves, strict=True)):
        expected = np.asarray(jax.random.key_data(ours)) if _is_key(ours) else np.asarray(ours)
        theirs = np.asarray(theirs)
        if expected.shape != theirs.shape or expected.dtype != theirs.dtype:
            raise ConfigError(
                f"{source}: array {index} has shape {theirs.shape} ({theirs.dtype}), this configuration "
                f"needs {expected.shape} ({expected.dtype}); it was written by a different configuration"
            )
        if _is_key(ours):
            restored.append(jax.random.wrap_key_data(jnp.asarray(theirs), impl=jax.random.key_impl(ours)))
        elif isinstance(ours, np.ndarray | np.generic | float | int):
            restored.append(theirs.copy())
        else:
            restored.append(jnp.asarray(theirs))
    return jax.tree_util.tree_unflatten(treedef, restored)

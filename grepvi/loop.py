"""The loops that run :func:`grepvi.inference.step`: one chunked runner, and windows.

* :func:`run_chunks`: a fixed schedule in jitted ``lax.scan`` chunks until a cap, with a
  callback after every chunk; ``grepvi.fit`` with a step size, the command line's fixed
  schedule (:func:`grepvi.runs.train`) and the fixed-step refit of held-out rows all use it.
* :func:`make_window`: the default procedure's windows (:mod:`grepvi.adaptive`).

Both take the data as an argument of the compiled program.
"""

import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ConfigError, NonFiniteStepWarning, NumericalError
from grepvi.estimators.base import Estimator, Target
from grepvi.inference import Trace, VIState, step

__all__ = ["STALL_STEPS", "report_skipped_steps", "ChunkReport", "chunk_program", "run_chunks", "make_window"]


STALL_STEPS = 50  # this many skipped steps in a row stop a run with NumericalError


def report_skipped_steps(finite, nonfinite_latents, names, first_iteration, consecutive=0, stall_steps=None):
    """Warns about skipped (non-finite) steps of one chunk; raises if the run has stalled.

    Returns the number of skipped steps in a row at the end of the chunk (carried to the
    next call). Which latent had the non-finite gradient and at which iterations is named.
    """
    finite = np.asarray(finite, bool)
    if finite.all():
        return 0
    bad = np.asarray(nonfinite_latents, bool)
    iterations = first_iteration + np.flatnonzero(~finite)
    latents = [name for i, name in enumerate(names) if bad[:, i].any()]
    warnings.warn(
        f"{(~finite).sum()} step(s) skipped at iteration(s) {iterations[:5].tolist()}"
        f"{'...' if iterations.size > 5 else ''}: non-finite gradient for latent(s) {latents} "
        "(the parameters were left as they were)",
        NonFiniteStepWarning,
        stacklevel=3,
    )
    run = 0
    for ok in finite:
        run = 0 if ok else run + 1
        consecutive = 0 if ok else consecutive + 1
        if consecutive >= (STALL_STEPS if stall_steps is None else stall_steps):
            raise NumericalError(
                f"{consecutive} steps in a row up to iteration {first_iteration + len(finite) - 1} "
                f"had a non-finite gradient (latents {latents}); the run has stalled. "
                "Lower the step size or check the model at the current parameters."
            )
    return consecutive


class ChunkReport(NamedTuple):
    """What :func:`run_chunks` hands its callback after each chunk.

    Attributes:
      state: the state after the chunk.
      first_iteration: iterations done before the chunk.
      done: iterations done after it.
      outputs: per-iteration arrays of the chunk (``elbo``, ``finite``,
        ``nonfinite_latents``, the estimator's scalar extras; ``params`` before each step
        with ``keep_params``).
      elapsed: seconds the chunk ran (compilation excluded).
      wall_time: seconds of running so far (``wall_time`` given plus every chunk's).
    """

    state: Any
    first_iteration: int
    done: int
    outputs: dict
    elapsed: float
    wall_time: float


def chunk_program(target: Target, estimator: Estimator, optimizer, length: int, keep_params: bool = False):
    """The jitted ``(state, data) -> (state, outputs)`` of ``length`` steps in a ``lax.scan``.

    The data is an argument (never a constant of the program). ``outputs`` are per iteration:
    ``elbo``, ``finite``, ``nonfinite_latents``, the scalar extras, and the parameters before
    each step with ``keep_params``.
    """

    def run(state, data):
        def body(carry, _):
            new_state, info = step(carry, target, estimator, optimizer, data)
            outputs = {"elbo": info.elbo, "finite": info.finite, "nonfinite_latents": info.nonfinite_latents}
            outputs.update({key: value for key, value in info.extras.items() if jnp.ndim(value) == 0})
            if keep_params:
                outputs["params"] = carry.params
            return new_state, outputs

        return jax.lax.scan(body, state, None, length=length)

    return jax.jit(run)


def run_chunks(
    state: VIState,
    target: Target,
    estimator: Estimator,
    optimizer,
    num_steps: int | None,
    chunk_size: int,
    callback: Callable | None = None,
    data=None,
    *,
    time_budget: float | None = None,
    wall_time: float = 0.0,
    should_stop: Callable[[], bool] | None = None,
    keep_params: bool = False,
    stall_steps: int | None = None,
):
    """The loop of a fixed schedule: jitted ``lax.scan`` chunks until a cap; one runner for all.

    ``grepvi.fit`` with a ``step_size`` or ``optimizer``, the command line's fixed schedule
    (:func:`grepvi.runs.train`: run folder, progress bar, checkpoints, SIGINT through
    ``callback`` and ``should_stop``) and the fixed-step refit of held-out rows all run here.
    (The default procedure runs in windows, :func:`make_window` and
    :func:`grepvi.adaptive.run_adaptive`.)

    Args:
      state: the state to start from (``state.iteration`` counts from there).
      num_steps: iterations to run (None: until ``time_budget`` or ``should_stop``).
      chunk_size: iterations per compiled chunk (the last may be shorter: one more program).
      callback: ``ChunkReport -> None`` after every chunk (outside the timed region).
      data: the data pytree of a target with ``takes_data``.
      time_budget: seconds of running (``wall_time`` included), checked between chunks.
      wall_time: seconds already run (a resumed run).
      should_stop: checked between chunks (SIGINT).
      keep_params: the outputs hold the parameters before each step.
      stall_steps: this many steps in a row with a non-finite gradient raise
        :class:`~grepvi.errors.NumericalError` (default ``STALL_STEPS``); the count runs
        across chunks.

    Returns:
      ``(state, trace, reason)``: the final state, the :class:`Trace` (ELBO and wall time
      per iteration, extras), and why it stopped (``"num_steps"``, ``"time_budget"``,
      ``"interrupted"``).
    """
    if num_steps is None and time_budget is None and should_stop is None:
        raise ConfigError("run_chunks: give num_steps, time_budget or should_stop")
    programs = {}

    def program(length):
        if length not in programs:
            jitted = chunk_program(target, estimator, optimizer, length, keep_params)
            programs[length] = jitted.lower(state, data).compile()
        return programs[length]

    elbos, times, extras = [], [], {}
    names = sorted(target.families)
    consecutive = 0
    done = 0
    reason = "num_steps"
    while True:
        if num_steps is not None and done >= num_steps:
            break
        if time_budget is not None and wall_time >= time_budget:
            reason = "time_budget"
            break
        if should_stop is not None and should_stop():
            reason = "interrupted"
            break
        length = chunk_size if num_steps is None else min(chunk_size, num_steps - done)
        run = program(length)  # compiled outside the timed region
        start = time.perf_counter()
        new_state, outputs = run(state, data)
        jax.block_until_ready(new_state)
        elapsed = time.perf_counter() - start
        outputs = jax.tree_util.tree_map(np.asarray, outputs)
        first = done
        state = new_state
        times.append(wall_time + elapsed * np.arange(1, length + 1) / length)
        wall_time += elapsed
        done += length
        elbos.append(outputs["elbo"])
        for key, value in outputs.items():
            if key not in ("elbo", "finite", "nonfinite_latents", "params"):
                extras.setdefault(key, []).append(value)
        if callback is not None:
            callback(ChunkReport(state, first, done, outputs, elapsed, wall_time))
        consecutive = report_skipped_steps(
            outputs["finite"], outputs["nonfinite_latents"], names, first, consecutive, stall_steps
        )
    trace = Trace(
        elbo=np.concatenate(elbos) if elbos else np.zeros(0),
        wall_time=np.concatenate(times) if times else np.zeros(0),
        extras={k: np.concatenate(v) for k, v in extras.items()},
    )
    return state, trace, reason


def make_window(target: Target, estimator: Estimator, optimizer, length: int, data=None):
    """A jitted ``(state, active) -> (state, mean of the iterates, outputs)`` of up to ``length`` steps.

    ``data`` is passed to the compiled window as an argument at every call (it is not a
    constant of the program); ``window.compiled(state, data, active)`` is the program.

    Only the first ``active`` steps (a traced integer, default all) run: the loop's trip count
    is ``active`` (a ``lax.fori_loop`` with a dynamic bound, an XLA while loop like the
    ``scan`` it replaces), so a shorter window costs proportionally less and needs no other
    program. The default procedure uses that to end a run at its cap and to fit its trial and
    last window into a time budget (a BBVI window of 100 steps of 3 s would otherwise overrun
    a 600 s budget by minutes). ``outputs`` holds the per-iteration ``elbo``, ``finite``,
    ``nonfinite_latents`` and the scalar ``extras`` (entries past ``active`` are zeros), and
    ``active``; the iterate mean (over the applied steps) feeds the averaging of
    :mod:`grepvi.adaptive`.
    """

    def one_step(state, data):
        new_state, info = step(state, target, estimator, optimizer, data)
        extras = {key: value for key, value in info.extras.items() if jnp.ndim(value) == 0}
        return new_state, {
            "elbo": info.elbo,
            "finite": info.finite,
            "nonfinite_latents": info.nonfinite_latents,
            "extras": extras,
        }

    @jax.jit
    def compiled(state, data, active):
        active = jnp.clip(jnp.asarray(active, jnp.int32), 0, length)
        shapes = jax.eval_shape(one_step, state, data)[1]
        buffers = jax.tree_util.tree_map(lambda s: jnp.zeros((length, *s.shape), s.dtype), shapes)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)

        def body(index, carry):
            state, total, buffers = carry
            state, out = one_step(state, data)
            total = jax.tree_util.tree_map(jnp.add, total, state.params)
            buffers = jax.tree_util.tree_map(lambda b, v: b.at[index].set(v), buffers, out)
            return state, total, buffers

        state, total, outputs = jax.lax.fori_loop(0, active, body, (state, zeros, buffers))
        mean = jax.tree_util.tree_map(lambda t: t / jnp.maximum(active, 1).astype(t.dtype), total)
        return state, mean, {**outputs, "active": active}

    def window(state, active=length):
        return compiled(state, data, active)

    def warm_up(state):
        """Compiles the window for ``state`` without running it (the call then reuses it)."""
        compiled.lower(state, data, length).compile()

    window.length = length
    window.compiled = compiled
    window.warm_up = warm_up
    return window

"""A resumable training loop for a run folder (files: :mod:`grepvi.run_files`).

The loop (:func:`train`) runs the inference step under ``jax.lax.scan`` in chunks of a FIXED
size (:func:`grepvi.loop.run_chunks`) and only stops, checkpoints or evaluates at chunk
boundaries, and every random key comes from the state itself (``VIState.rng_key``, split once
per step). So the sequence of steps does not depend on when the run was stopped: a run killed
at any point and resumed from its last checkpoint ends with bitwise the same parameters (on the
same machine) as one that ran straight through. :func:`train_adaptive` does the same for the
default procedure, at window boundaries.

Wall time counts only the training chunks (compiled ahead of time, so compilation is not
counted); evaluation-only work (ADVI's 20-sample ELBO, perplexities) runs outside the timed
region.
"""

import math
import signal
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from grepvi.errors import ConfigError, GrepviError
from grepvi.inference import VIState
from grepvi.run_files import (  # noqa: F401 - the run's files, re-exported for callers of runs
    CHECKPOINT_FILE,
    CONFIG_FILE,
    FIGURES_DIR,
    METRICS_FILE,
    PARAMS_FILE,
    RECONSTRUCTION_FILE,
    RUN_FILES,
    TRACE_FILE,
    RunDirectory,
    TraceRecorder,
    atomic_write_bytes,
    atomic_write_text,
    environment_versions,
    flatten_state,
    load_params,
    read_json,
    read_trace,
    remaining_steps,
    save_params,
    unflatten_state,
    write_json,
)

__all__ = [
    "RunInterrupted",
    "RunDirectory",
    "TraceRecorder",
    "atomic_write_bytes",
    "atomic_write_text",
    "write_json",
    "read_json",
    "environment_versions",
    "flatten_state",
    "unflatten_state",
    "save_params",
    "load_params",
    "read_trace",
    "median_time_per_iteration",
    "train",
    "train_adaptive",
    "TrainResult",
    "RUN_FILES",
    "remaining_steps",
    "stop_signal",
]


class RunInterrupted(GrepviError):
    """The run was stopped by SIGINT or SIGTERM after writing a checkpoint (the CLI exits with
    128 + the signal's number: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, signal_number: int = signal.SIGINT):
        super().__init__(message)
        self.signal_number = int(signal_number)


class TrainResult(NamedTuple):
    state: VIState
    trace: TraceRecorder
    wall_time: float
    chunk_times: list  # seconds per iteration of every full chunk timed in this process
    interrupted: bool
    finished: bool


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_last_stop_signal = [None]


def stop_signal() -> int | None:
    """The signal (SIGINT or SIGTERM) that last stopped a run of this process, or None."""
    return _last_stop_signal[0]


class _SigintCatcher:
    """Turns SIGINT and SIGTERM into a flag checked at chunk boundaries (main thread only); a
    second signal stops at once (``KeyboardInterrupt``)."""

    def __init__(self):
        self.caught = False
        self.signal_number = None
        self.previous = {}

    def __enter__(self):
        if _in_main_thread():
            for number in STOP_SIGNALS:
                self.previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.caught:  # a second signal: stop now
            raise KeyboardInterrupt
        self.caught = True
        self.signal_number = signum
        _last_stop_signal[0] = signum

    def __exit__(self, *exc):
        for number, previous in self.previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        return False


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def train(
    state: VIState,
    target,
    estimator,
    optimizer,
    *,
    num_steps: int | None,
    time_budget: float | None,
    chunk_size: int,
    trace: TraceRecorder,
    wall_time: float = 0.0,
    elbo_fn: Callable | None = None,
    elbo_every: int = 1,
    chunk_eval_fn: Callable | None = None,
    checkpoint_fn: Callable | None = None,
    checkpoint_every: int = 0,
    checkpoint_seconds: float = 0.0,
    progress: bool = True,
    description: str = "fit",
    data=None,
) -> TrainResult:
    """Runs steps in chunks of ``chunk_size`` until ``num_steps`` or ``time_budget`` (seconds of
    training wall time) is reached, or SIGINT.

    Args:
      state: the state to start from (fresh or restored).
      num_steps: total iterations (counting those already done), or None.
      time_budget: total training wall time in seconds, or None; checked at chunk boundaries.
      chunk_size: iterations per compiled chunk; keep it fixed across a resume.
      trace: the recorder to append to (holds the rows of a resumed run).
      wall_time: training wall time spent before ``state`` (resumed runs).
      elbo_fn: ``(iterations, params_per_iteration) -> elbos``: evaluation-only ELBO of the
        parameters *before* each step (e.g. ADVI's 20 draws), run outside the timed region; the
        estimator's own ELBO (of its gradient draws) then goes to the column ``elbo_draw``.
        Without it the ``elbo`` column is the estimator's ELBO.
      elbo_every: evaluate ``elbo_fn`` at every iteration (1) or at the first iteration of every
        ``elbo_every``-th iteration (a multiple of ``chunk_size``; ``elbo`` is blank elsewhere).
      chunk_eval_fn: ``(state) -> {column: value}`` after each chunk, untimed (perplexity).
      checkpoint_fn: ``(state, trace, wall_time)`` writes a checkpoint; called every
        ``checkpoint_every`` iterations and every ``checkpoint_seconds`` seconds (both at chunk
        boundaries), and when interrupted.
      data: the data pytree of a target with ``takes_data`` (an argument of the compiled
        chunks).
    """
    if num_steps is None and time_budget is None:
        raise ConfigError("give a number of steps (num_steps) or a time budget (time_budget)")
    if elbo_fn is not None and elbo_every != 1 and elbo_every % chunk_size:
        raise ConfigError(
            f"elbo_every: expected 1 or a multiple of chunk_size {chunk_size}, found {elbo_every}"
        )
    from grepvi.errors import NumericalError
    from grepvi.loop import run_chunks

    keep_params = elbo_fn is not None and elbo_every == 1
    start_iteration = int(state.iteration)
    bar = None
    if progress:
        from grepvi.progress import progress_bar

        bar = progress_bar(num_steps, initial=start_iteration, description=description)
    chunk_times = []
    last = {"iteration": start_iteration, "clock": time.monotonic(), "state": state, "wall": wall_time}

    def callback(report):
        length = report.done - report.first_iteration
        outputs = report.outputs
        if length == chunk_size:
            chunk_times.append(report.elapsed / length)
        iterations = np.arange(
            start_iteration + report.first_iteration + 1, start_iteration + report.done + 1
        )
        rows = {
            "iteration": iterations,
            "wall_time": report.wall_time
            - report.elapsed
            + report.elapsed * np.arange(1, length + 1) / length,
            "elbo": np.asarray(outputs["elbo"], np.float64),
        }
        if elbo_fn is not None:
            rows["elbo_draw"] = rows["elbo"]
            if keep_params:
                rows["elbo"] = np.asarray(elbo_fn(iterations, outputs["params"]), np.float64)
            else:
                rows["elbo"] = np.full(length, np.nan)
                if (iterations[0] - 1) % elbo_every == 0:
                    params = jax.tree_util.tree_map(lambda leaf: leaf[None], last["state"].params)
                    rows["elbo"][0] = float(np.asarray(elbo_fn(iterations[:1], params))[0])
        for key, value in outputs.items():
            if key not in ("elbo", "finite", "params", "nonfinite_latents"):
                rows[key] = np.asarray(value, np.float64)
        rows["skipped"] = 1.0 - np.asarray(outputs["finite"], np.float64)
        trace.add(rows)
        if chunk_eval_fn is not None:
            for key, value in chunk_eval_fn(report.state).items():
                trace.set_last(key, float(value))
        if bar is not None:
            shown = rows["elbo"] if np.isfinite(rows["elbo"]).any() else rows.get("elbo_draw", rows["elbo"])
            finite = shown[np.isfinite(shown)]
            bar.update(length)
            bar.set_postfix(
                elbo=f"{np.mean(finite):.5g}" if finite.size else "nan",
                time=f"{report.wall_time:.0f}s",
                refresh=False,
            )
        last["state"], last["wall"] = report.state, report.wall_time
        done = start_iteration + report.done
        due = (checkpoint_every and done - last["iteration"] >= checkpoint_every) or (
            checkpoint_seconds and time.monotonic() - last["clock"] >= checkpoint_seconds
        )
        if checkpoint_fn is not None and due:
            checkpoint_fn(report.state, trace, report.wall_time)
            last["iteration"], last["clock"] = done, time.monotonic()

    reason = "num_steps"
    try:
        with _SigintCatcher() as sigint:
            try:
                state, _, reason = run_chunks(
                    state,
                    target,
                    estimator,
                    optimizer,
                    None if num_steps is None else max(0, num_steps - start_iteration),
                    chunk_size,
                    callback,
                    data,
                    time_budget=time_budget,
                    wall_time=wall_time,
                    should_stop=lambda: sigint.caught,
                    keep_params=keep_params,
                )
            except NumericalError:
                if checkpoint_fn is not None:  # the run stalled: keep what it did, then say so
                    checkpoint_fn(last["state"], trace, last["wall"])
                raise
            wall_time = last["wall"]
            if checkpoint_fn is not None and int(state.iteration) != last["iteration"]:
                checkpoint_fn(state, trace, wall_time)
    finally:
        if bar is not None:
            bar.close()
    interrupted = reason == "interrupted"
    return TrainResult(state, trace, wall_time, chunk_times, interrupted, not interrupted)


def median_time_per_iteration(trace_arrays) -> float:
    """Median seconds per iteration from the trace's wall times (training time only; within a
    chunk the iterations share the chunk's time, so this is the median over chunks weighted by
    their length, resumed runs included)."""
    wall = np.asarray(trace_arrays.get("wall_time", np.zeros(0)), np.float64)
    if wall.size == 0:
        return math.nan
    return float(np.median(np.diff(wall, prepend=0.0)))


def train_adaptive(
    candidates,
    families: dict,
    settings,
    *,
    num_steps: int | None,
    time_budget: float | None,
    trace: TraceRecorder,
    chunk_eval_fn: Callable | None = None,
    checkpoint_fn: Callable | None = None,
    checkpoint_seconds: float = 0.0,
    progress: bool = True,
    description: str = "fit",
):
    """The default procedure (:func:`grepvi.adaptive.run_adaptive`) for a run folder: the
    trace gets a row per iteration (the estimator's own ELBO: no extra draws, so monitoring
    costs nothing beyond the window's bookkeeping), ``chunk_eval_fn`` runs after each window,
    checkpoints every ``checkpoint_seconds`` and at the end, SIGINT stops at a window boundary.

    The time budget is wall time from the start, compilation and the trial of the candidate
    update rules included. Returns ``(TrainResult, Convergence)``; the result's state holds
    the answer (the averaged iterate where one was formed).
    """
    from grepvi.adaptive import run_adaptive
    from grepvi.fitting import _trial_display

    bar = None
    if progress:
        from grepvi.progress import progress_bar

        bar = progress_bar(num_steps, description=description)
    last_checkpoint = [time.monotonic()]
    wall = [0.0]

    with _SigintCatcher() as sigint:

        def callback(report):
            n = report.elbo.size
            first = report.iterations_done - n + 1
            previous = wall[0]
            rows = {
                "iteration": np.arange(first, first + n),
                "wall_time": previous + (report.wall_time - previous) * np.arange(1, n + 1) / n,
                "elbo": np.asarray(report.elbo, np.float64),
                "skipped": 1.0 - np.asarray(report.finite, np.float64),
                "step_size": np.full(n, report.step_size),
            }
            for key, value in report.extras.items():
                rows[key] = np.asarray(value, np.float64)
            wall[0] = report.wall_time
            trace.add(rows)
            if chunk_eval_fn is not None:
                for key, value in chunk_eval_fn(report.state).items():
                    trace.set_last(key, float(value))
            if bar is not None:
                finite = rows["elbo"][np.isfinite(rows["elbo"])]
                bar.set_description_str(description, refresh=False)
                bar.update(n)
                bar.set_postfix(
                    elbo=f"{np.median(finite):.5g}" if finite.size else "nan",
                    phase=report.phase,
                    rho=f"{report.step_size:.3g}",
                    acc=f"{report.accuracy:.2g}",
                    time=f"{report.wall_time:.0f}s",
                    refresh=False,
                )
            if (
                checkpoint_fn is not None
                and checkpoint_seconds
                and (time.monotonic() - last_checkpoint[0] >= checkpoint_seconds)
            ):
                checkpoint_fn(report.state, trace, report.wall_time)
                last_checkpoint[0] = time.monotonic()

        try:
            state, params, convergence = run_adaptive(
                candidates,
                families,
                settings,
                max_steps=num_steps,
                time_budget=time_budget,
                callback=callback,
                should_stop=lambda: sigint.caught,
                on_trial_window=None if bar is None else _trial_display(bar, description),
            )
        finally:
            if bar is not None:
                bar.close()
    interrupted = convergence.reason == "interrupted"
    if checkpoint_fn is not None:
        checkpoint_fn(state, trace, wall[0])
    result = TrainResult(state, trace, wall[0], [], interrupted, not interrupted)
    return result, convergence

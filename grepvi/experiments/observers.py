"""A run folder's loop pieces: the trace recorder, checkpoints and signals, as observers of
the one loop (:func:`grepvi.inference.driver.run`; files: :mod:`grepvi.experiments.run_files`).

Every random key comes from the state itself and the controller's decisions are functions of
the window outputs, so the sequence of steps does not depend on when the run was stopped: a
run killed at any point and resumed from its last checkpoint (the whole
:class:`~grepvi.inference.driver.RunState`: loop state, controller state, wall time) ends with bitwise
the same parameters, trace and metrics (on the same machine) as one that ran straight through,
and its trace's iterations and wall time continue.
"""

import math
import signal
import threading
import time
from collections.abc import Callable

import numpy as np

from grepvi.errors import GrepviError
from grepvi.experiments.run_files import TraceRecorder
from grepvi.inference import driver

__all__ = [
    "RunInterrupted",
    "RunRecorder",
    "CheckpointObserver",
    "SignalCatcher",
    "stop_signal",
    "median_time_per_iteration",
]


class RunInterrupted(GrepviError):
    """The run was stopped by SIGINT or SIGTERM after writing a checkpoint (the CLI exits with
    128 + the signal's number: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, signal_number: int = signal.SIGINT):
        super().__init__(message)
        self.signal_number = int(signal_number)


_last_stop_signal = [None]


def stop_signal() -> int | None:
    """The signal (SIGINT or SIGTERM) that last stopped a run of this process, or None."""
    return _last_stop_signal[0]


class SignalCatcher:
    """Turns SIGINT and SIGTERM into a stop at the next window boundary (main thread only);
    a second signal stops at once (``KeyboardInterrupt``; the command line exits quietly, the
    last checkpoint kept)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.caught = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self.previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.caught is not None:  # a second signal: stop now
            raise KeyboardInterrupt
        self.caught = signal.Signals(signum).name
        _last_stop_signal[0] = int(signum)

    def on_window(self, event) -> None:
        pass

    def should_stop(self) -> bool:
        return self.caught is not None

    def __exit__(self, *exc):
        for number, handler in self.previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        return False


class RunRecorder(driver.TraceObserver):
    """The trace of a run folder (:class:`~grepvi.experiments.run_files.TraceRecorder`): a row per
    iteration, the evaluation-only ELBO of ``--elbo-samples`` (outside the timed region; the
    estimator's own ELBO then goes to ``elbo_draw``), and ``window_eval_fn`` columns
    (perplexity) at each window's last row."""

    def __init__(
        self,
        trace: TraceRecorder,
        names=(),
        wall_time: float = 0.0,
        elbo_fn: Callable | None = None,
        elbo_every: int = 1,
        window_eval_fn: Callable | None = None,
    ):
        super().__init__(names, wall_time)
        self.trace = trace
        self.elbo_fn = elbo_fn
        self.elbo_every = elbo_every
        self.window_eval_fn = window_eval_fn

    def on_window(self, event) -> None:
        rows = self.rows(event)
        finite = np.asarray(event.outputs["finite"], bool)
        self.skipped += int((~finite).sum())
        if self.elbo_fn is not None:
            iterations = rows["iteration"].astype(np.int64)
            rows["elbo_draw"] = rows["elbo"]
            if "params" in event.outputs:
                rows["elbo"] = np.asarray(self.elbo_fn(iterations, event.outputs["params"]), np.float64)
            else:
                rows["elbo"] = np.full(iterations.size, np.nan)
                if (iterations[0] - 1) % self.elbo_every == 0:
                    params = driver.leading_axis(event.previous_loop.params)
                    rows["elbo"][0] = float(np.asarray(self.elbo_fn(iterations[:1], params))[0])
        self.trace.add(rows)
        if self.window_eval_fn is not None:
            values = self.window_eval_fn(event.run_state.loop, int(rows["iteration"][-1]))
            for key, value in values.items():
                self.trace.set_last(key, float(value))


class CheckpointObserver(driver.StallAware):
    """Writes the run state and trace every ``every`` iterations and every ``seconds`` seconds
    (at window boundaries), and on request."""

    def __init__(self, save: Callable, trace: TraceRecorder, every: int = 0, seconds: float = 0.0):
        self.save = save
        self.trace = trace
        self.every = every
        self.seconds = seconds
        self.last_iteration = None
        self.last_clock = time.monotonic()
        self.latest = None

    def on_window(self, event) -> None:
        self.latest = event.run_state
        done = int(event.run_state.controller.iterations)
        if self.last_iteration is None:
            self.last_iteration = event.first_iteration
        due = (self.every and done - self.last_iteration >= self.every) or (
            self.seconds and time.monotonic() - self.last_clock >= self.seconds
        )
        if due:
            self.write_last()

    def write_last(self) -> None:
        if self.latest is None:
            return
        self.save(self.latest, self.trace)
        self.last_iteration = int(self.latest.controller.iterations)
        self.last_clock = time.monotonic()


def median_time_per_iteration(trace_arrays) -> float:
    """Median seconds per iteration from the trace's wall times (training time only; within a
    chunk the iterations share the chunk's time, so this is the median over chunks weighted by
    their length, resumed runs included)."""
    wall = np.asarray(trace_arrays.get("wall_time", np.zeros(0)), np.float64)
    if wall.size == 0:
        return math.nan
    return float(np.median(np.diff(wall, prepend=0.0)))

"""A run on disk: its directory, configuration, trace, checkpoints, and a resumable loop.

A run directory holds::

    config.json       every option, the seed, versions (python, jax, jaxlib, grepvi), data set info
    trace.csv         one row per iteration: iteration, wall_time, elbo, and diagnostics
                      (gradient_variance, perplexity) where computed, blank elsewhere
    checkpoint.npz    the optimizer state at the last checkpoint, with the trace so far
    params.npz        the final variational parameters
    metrics.json      test log-likelihood, time per iteration, final ELBO, ...
    figures/          PNG figures of this run

The loop (:func:`train`) runs the inference step under ``jax.lax.scan`` in chunks of a FIXED
size and only stops, checkpoints or evaluates at chunk boundaries, and every random key comes
from the state itself (``VIState.rng_key``, split once per step). So the sequence of steps does
not depend on when the run was stopped: a run killed at any point and resumed from its last
checkpoint ends with bitwise the same parameters (on the same machine) as one that ran
straight through. Checkpoints are written atomically (temporary file in the same folder,
``fsync``, ``os.replace``), so a kill during a write leaves the previous checkpoint intact.

Wall time counts only the training chunks (compiled ahead of time, so compilation is not
counted); evaluation-only work (ADVI's 20-sample ELBO, perplexities) runs outside the timed
region.
"""

import csv
import io
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ConfigError, GrepviError
from grepvi.inference import VIState

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
    "TrainResult",
    "RUN_FILES",
]

CONFIG_FILE = "config.json"
TRACE_FILE = "trace.csv"
CHECKPOINT_FILE = "checkpoint.npz"
PARAMS_FILE = "params.npz"
METRICS_FILE = "metrics.json"
FIGURES_DIR = "figures"
RECONSTRUCTION_FILE = "reconstruction.npz"
RUN_FILES = (CONFIG_FILE, TRACE_FILE, CHECKPOINT_FILE, PARAMS_FILE, METRICS_FILE, RECONSTRUCTION_FILE)


class RunInterrupted(GrepviError):
    """The run was stopped by SIGINT after writing a checkpoint (the CLI exits with 130)."""


# --- files ------------------------------------------------------------------------------------


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that ``path`` always holds either the old or the new
    content: temporary file in the same folder, ``fsync``, ``os.replace``, ``fsync`` folder."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def write_json(path, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, default=_json_default, allow_nan=True) + "\n")


def read_json(path) -> dict:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not a valid JSON file ({error})") from error


def environment_versions() -> dict:
    import jaxlib

    import grepvi

    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "grepvi": grepvi.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "git_commit": _git_commit(),
    }


def _git_commit() -> str | None:
    """``HEAD`` of the git checkout grepvi runs from (``+dirty`` with uncommitted changes)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "grepvi"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


# --- state <-> arrays ---------------------------------------------------------------------------


def _state_for_storage(state: VIState) -> VIState:
    return state._replace(rng_key=jax.random.key_data(state.rng_key))


def flatten_state(state: VIState) -> list[np.ndarray]:
    """The leaves of ``state`` as NumPy arrays (the random key as its raw key data)."""
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(_state_for_storage(state))]


def unflatten_state(template: VIState, leaves: list[np.ndarray], source: str) -> VIState:
    """``leaves`` put back into the structure of ``template`` (a freshly initialized state of the
    same configuration); a :class:`ConfigError` when they do not fit."""
    stored = _state_for_storage(template)
    template_leaves, treedef = jax.tree_util.tree_flatten(stored)
    if len(template_leaves) != len(leaves):
        raise ConfigError(
            f"{source}: the checkpoint holds {len(leaves)} arrays, this configuration needs "
            f"{len(template_leaves)}; it was written by a different model or estimator"
        )
    for index, (mine, theirs) in enumerate(zip(template_leaves, leaves, strict=True)):
        if tuple(np.shape(mine)) != tuple(theirs.shape) or np.asarray(mine).dtype != theirs.dtype:
            raise ConfigError(
                f"{source}: checkpoint array {index} has shape {theirs.shape} ({theirs.dtype}), this "
                f"configuration needs {tuple(np.shape(mine))} ({np.asarray(mine).dtype}); it was written "
                "by a different configuration"
            )
    restored = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])
    return restored._replace(rng_key=jax.random.wrap_key_data(restored.rng_key))


def _path_name(path) -> str:
    parts = []
    for entry in path:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return "/".join(parts)


def save_params(path, params: dict) -> None:
    """Variational parameters to an ``.npz``, one array per leaf named ``latent/parameter``."""
    arrays = {_path_name(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def load_params(path) -> dict[str, np.ndarray]:
    """The arrays of a :func:`save_params` file, keyed ``latent/parameter``."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


# --- trace ---------------------------------------------------------------------------------------


class TraceRecorder:
    """Per-iteration columns (``iteration``, ``wall_time``, ``elbo``, diagnostics).

    Diagnostics computed only at some iterations (perplexity every 10) are NaN elsewhere and
    written as blank cells.
    """

    BASE = ("iteration", "wall_time", "elbo")

    def __init__(self, columns: dict[str, np.ndarray] | None = None):
        self.columns: dict[str, list[np.ndarray]] = {}
        self.length = 0
        if columns:
            self.length = len(columns["iteration"])
            for name, values in columns.items():
                self.columns[name] = [np.asarray(values, np.float64)]

    def add(self, rows: dict[str, np.ndarray]) -> None:
        n = len(rows["iteration"])
        for name in rows:
            if name not in self.columns:
                self.columns[name] = [np.full(self.length, np.nan)]
        for name in self.columns:
            values = rows.get(name)
            self.columns[name].append(
                np.full(n, np.nan) if values is None else np.asarray(values, np.float64)
            )
        self.length += n

    def set_last(self, name: str, value: float) -> None:
        if name not in self.columns:
            self.columns[name] = [np.full(self.length, np.nan)]
        column = self.as_arrays()[name]
        column[-1] = value
        self.columns[name] = [column]

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {name: np.concatenate(parts) if parts else np.zeros(0) for name, parts in self.columns.items()}

    def names(self) -> list[str]:
        extra = sorted(name for name in self.columns if name not in self.BASE)
        return [name for name in self.BASE if name in self.columns] + extra

    def to_csv(self) -> str:
        arrays = self.as_arrays()
        names = self.names()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        for i in range(self.length):
            row = []
            for name in names:
                value = arrays[name][i]
                if name == "iteration":
                    row.append(str(int(value)))
                elif np.isnan(value):
                    row.append("")
                else:
                    row.append(repr(float(value)))
            writer.writerow(row)
        return out.getvalue()


def read_trace(path) -> dict[str, np.ndarray]:
    """A ``trace.csv`` as float arrays (blank cells are NaN)."""
    with open(path, encoding="utf-8", newline="") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if header is None:
            return {}
        rows = list(reader)
    columns = {name: np.full(len(rows), np.nan) for name in header}
    for i, row in enumerate(rows):
        for name, cell in zip(header, row, strict=False):
            if cell != "":
                columns[name][i] = float(cell)
    return columns


# --- the run directory ----------------------------------------------------------------------------


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [
        f"{key}: {old.get(key, '<absent>')!r} there, {new.get(key, '<absent>')!r} now"
        for key in keys
        if old.get(key) != new.get(key)
    ]


class RunDirectory:
    """The output folder of one run and the rules for reusing it.

    ``identity`` is the part of the configuration that determines the result (model, data,
    estimator, options, seed, budget); a folder holding a run with another identity is refused
    unless ``overwrite``; a folder holding any run is refused unless ``resume`` or ``overwrite``.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def figures(self) -> Path:
        return self.path / FIGURES_DIR

    def holds_run(self) -> bool:
        return self.path.is_dir() and any((self.path / name).exists() for name in RUN_FILES)

    def check(self, identity: dict, *, resume: bool, overwrite: bool) -> str:
        """Decides what to do with the folder; raises before anything is written.

        Returns "fresh" (empty or new folder, or ``overwrite``) or "resume".
        """
        if resume and overwrite:
            raise ConfigError("resume=True and overwrite=True exclude each other; pass one of them")
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"output {str(self.path)!r}: expected a folder, found a file")
        if not self.holds_run():
            if resume:
                raise ConfigError(
                    f"resume=True: {str(self.path)!r} holds no run to resume (no {CONFIG_FILE})"
                )
            return "fresh"
        if overwrite:
            return "fresh"
        config_path = self.file(CONFIG_FILE)
        if not config_path.exists():
            raise ConfigError(
                f"output {str(self.path)!r} holds files of a run but no {CONFIG_FILE}; pass overwrite=True "
                "to replace them or choose another --out"
            )
        old = read_json(config_path).get("identity", {})
        differences = _differences(old, identity)
        if not resume:
            what = "a different run" if differences else "a run with this configuration"
            raise ConfigError(
                f"output {str(self.path)!r} already holds {what}; pass resume=True to continue it "
                "or overwrite=True to replace it, or choose another output folder"
                + (f" (differences: {'; '.join(differences)})" if differences else "")
            )
        if differences:
            raise ConfigError(
                f"resume=True: {str(self.path)!r} holds a run with another configuration; "
                f"differences: {'; '.join(differences)}. "
                "Pass --overwrite to replace it or use the same options"
            )
        return "resume"

    def clear(self) -> None:
        """Removes this module's run files (and figures) from the folder; nothing else."""
        for name in RUN_FILES:
            path = self.file(name)
            if path.exists():
                path.unlink()
        if self.figures.is_dir():
            shutil.rmtree(self.figures)

    def prepare(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.figures.mkdir(exist_ok=True)

    # checkpoints
    def save_checkpoint(self, state: VIState, trace: TraceRecorder, identity: dict, extra: dict) -> None:
        arrays = {f"state_{i:04d}": leaf for i, leaf in enumerate(flatten_state(state))}
        for name, values in trace.as_arrays().items():
            arrays[f"trace__{name}"] = values
        meta = {"identity": identity, **extra}
        arrays["meta"] = np.frombuffer(json.dumps(meta, default=_json_default).encode("utf-8"), np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        atomic_write_bytes(self.file(CHECKPOINT_FILE), buffer.getvalue())
        atomic_write_text(self.file(TRACE_FILE), trace.to_csv())

    def checkpoint_meta(self) -> dict:
        """The checkpoint's metadata (``{}`` when there is no readable checkpoint)."""
        path = self.file(CHECKPOINT_FILE)
        if not path.exists():
            return {}
        try:
            with np.load(path) as data:
                return json.loads(bytes(data["meta"]).decode("utf-8"))
        except (OSError, ValueError, KeyError):
            return {}

    def load_checkpoint(self, template: VIState, identity: dict):
        """``(state, trace, meta)`` from the checkpoint, or None when there is none."""
        path = self.file(CHECKPOINT_FILE)
        if not path.exists():
            return None
        try:
            with np.load(path) as data:
                meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                leaves = [data[name] for name in sorted(n for n in data.files if n.startswith("state_"))]
                trace = {n[len("trace__") :]: data[n] for n in data.files if n.startswith("trace__")}
        except (OSError, ValueError, KeyError) as error:
            raise ConfigError(
                f"{path}: unreadable checkpoint ({error}); pass overwrite=True to start again"
            ) from error
        differences = _differences(meta.get("identity", {}), identity)
        if differences:
            raise ConfigError(
                f"{path}: the checkpoint comes from another configuration ({'; '.join(differences)}); "
                "pass --overwrite to start again or use the options it was written with"
            )
        state = unflatten_state(template, leaves, str(path))
        return state, TraceRecorder(trace if trace else None), meta


# --- the training loop ----------------------------------------------------------------------------


class TrainResult(NamedTuple):
    state: VIState
    trace: TraceRecorder
    wall_time: float
    chunk_times: list  # seconds per iteration of every full chunk timed in this process
    interrupted: bool
    finished: bool


class _SigintCatcher:
    """Turns SIGINT into a flag checked at chunk boundaries (main thread only)."""

    def __init__(self):
        self.caught = False
        self.previous = None

    def __enter__(self):
        if _in_main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.caught:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.caught = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
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
    from grepvi.inference import run_chunks

    keep_params = elbo_fn is not None and elbo_every == 1
    start_iteration = int(state.iteration)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=num_steps,
            initial=start_iteration,
            desc=description,
            unit="it",
            dynamic_ncols=True,
            file=sys.stderr,
        )
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
                elbo=f"{np.mean(finite):.5g}" if finite.size else "nan", time=f"{report.wall_time:.0f}s"
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
    from grepvi.inference import _trial_display

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, desc=description, unit="it", dynamic_ncols=True, file=sys.stderr)
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

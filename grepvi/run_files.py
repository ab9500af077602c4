"""A run's files: atomic writes, the trace, state and parameters, and the run directory's rules.

A run directory holds::

    config.json       every option, the seed, versions (python, jax, jaxlib, grepvi), data set info
    trace.csv         one row per iteration: iteration, wall_time, elbo, and diagnostics
                      (gradient_variance, perplexity) where computed, blank elsewhere
    checkpoint.npz    the optimizer state at the last checkpoint, with the trace so far
    params.npz        the final variational parameters
    metrics.json      test log-likelihood, time per iteration, final ELBO, ...
    figures/          PNG figures of this run

Checkpoints are written atomically (temporary file in the same folder, ``fsync``,
``os.replace``), so a kill during a write leaves the previous checkpoint intact.
"""

import csv
import io
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

import jax
import numpy as np

from grepvi.errors import ConfigError

__all__ = [
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


def flatten_state(state) -> list[np.ndarray]:
    """The leaves of a run's state as NumPy arrays (random keys as their raw key data)."""
    from grepvi.driver import to_storage

    return to_storage(state)


def unflatten_state(template, leaves: list[np.ndarray], source: str):
    """``leaves`` put back into the structure of ``template`` (a freshly initialized state of the
    same configuration); a :class:`ConfigError` when they do not fit."""
    from grepvi.driver import from_storage

    return from_storage(template, leaves, source)


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
    def save_checkpoint(self, state, trace: TraceRecorder, identity: dict, extra: dict) -> None:
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

    def load_checkpoint(self, template, identity: dict):
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

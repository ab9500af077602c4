"""A run's files: atomic writes, the trace, state and parameters, and the run directory's rules.

A run directory holds::

    .grepvi-run       marks the folder as a grepvi run (format version); grepvi writes only into
                      a new or empty folder or one with this marker
    .grepvi-lock      the lock of the process writing the run (pid, host, start), held with
                      ``fcntl.flock`` for the run's life
    config.json       every option, the seed, versions (python, jax, jaxlib, grepvi), data set info
    trace.csv         one row per iteration: iteration, wall_time, elbo, and diagnostics
                      (gradient_variance, perplexity) where computed, blank elsewhere
    checkpoint.npz    the optimizer state at the last checkpoint, with the trace so far, a format
                      version and a sha256 checksum
    checkpoint.prev.npz  the checkpoint before it (one bad write never loses the run)
    params.npz        the final variational parameters
    metrics.json      test log-likelihood, time per iteration, final ELBO, ... (strict JSON:
                      ``null`` for a value that is not finite, with a ``<name>_note`` saying why)
    figures/          PNG figures of this run (only the names in ``RUN_FIGURES`` are grepvi's)

These files (:data:`OWNED_FILES`) are the only ones grepvi writes or removes in a run folder.
Every write is atomic (temporary file in the same folder, ``fsync``, ``os.replace``), so a kill
during a write leaves the previous content intact; the temporaries a kill leaves are removed when
the folder is next used.
"""

import csv
import hashlib
import io
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from grepvi.errors import ConfigError

__all__ = [
    "RunDirectory",
    "RunFolderError",
    "Checkpoint",
    "verify_checkpoint",
    "remaining_steps",
    "iterations_done",
    "strict_json",
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
    "OWNED_FILES",
    "RUN_FIGURES",
]

CONFIG_FILE = "config.json"
TRACE_FILE = "trace.csv"
CHECKPOINT_FILE = "checkpoint.npz"
PARAMS_FILE = "params.npz"
METRICS_FILE = "metrics.json"
FIGURES_DIR = "figures"
RECONSTRUCTION_FILE = "reconstruction.npz"
RUN_FILES = (CONFIG_FILE, TRACE_FILE, CHECKPOINT_FILE, PARAMS_FILE, METRICS_FILE, RECONSTRUCTION_FILE)
CHECKPOINT_PREV_FILE = "checkpoint.prev.npz"
MARKER_FILE = ".grepvi-run"
LOCK_FILE = ".grepvi-lock"
RUN_FIGURES = tuple(
    f"{FIGURES_DIR}/{name}" for name in ("elbo_vs_time.png", "perplexity_vs_time.png", "reconstructions.png")
)
OWNED_FILES = (MARKER_FILE, LOCK_FILE) + RUN_FILES + (CHECKPOINT_PREV_FILE,) + RUN_FIGURES
RUN_FORMAT = 1  # of the marker file
CHECKPOINT_FORMAT = 2  # 1: no format or checksum (read as is); 2: sha256 checksum
CHECKSUM_MEMBER = "checksum_sha256"


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
        try:  # a failing cleanup must not hide the first error
            os.unlink(temporary)
        except OSError:
            pass
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


def strict_json(value):
    """``value`` with every non-finite number replaced by ``None`` (JSON has no NaN or infinity);
    in a dict, ``<key>_note`` says what the value was unless the dict already explains it."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key] = strict_json(item)
            if _non_finite(item) and f"{key}_note" not in value:
                out[f"{key}_note"] = f"not finite ({float(item)})"
        return out
    if isinstance(value, list | tuple):
        return [strict_json(item) for item in value]
    if isinstance(value, np.ndarray):
        return strict_json(value.tolist())
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(float(value)) else None
    return value


def _non_finite(value) -> bool:
    return isinstance(value, float | np.floating) and not math.isfinite(float(value))


def write_json(path, value) -> None:
    """``value`` as strict JSON (see :func:`strict_json`), written atomically."""
    text = json.dumps(strict_json(value), indent=2, default=_json_default, allow_nan=False)
    atomic_write_text(path, text + "\n")


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
    from grepvi.inference.driver import to_storage

    return to_storage(state)


def unflatten_state(template, leaves: list[np.ndarray], source: str):
    """``leaves`` put back into the structure of ``template`` (a freshly initialized state of the
    same configuration); a :class:`ConfigError` when they do not fit."""
    from grepvi.inference.driver import from_storage

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


class RunFolderError(ConfigError):
    """The run folder cannot be used as asked (not a run, in use, damaged, not writable); the
    command line exits with status 2 and this message."""


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [
        f"{key}: {old.get(key, '<absent>')!r} there, {new.get(key, '<absent>')!r} now"
        for key in keys
        if old.get(key) != new.get(key)
    ]


def remaining_steps(cap: int | None, done: int) -> int | None:
    """Iterations still to run under the cap ``cap`` after ``done`` iterations of the run
    (counted by the run's trace, never by a restored state's counter: the default procedure's
    answer may be an older, averaged state); never negative, None without a cap."""
    if cap is None:
        return None
    return max(0, int(cap) - int(done))


def iterations_done(trace_columns) -> int:
    """Iterations a run has done according to its trace (its last ``iteration``; 0 if empty)."""
    iterations = np.asarray((trace_columns or {}).get("iteration", np.zeros(0)), np.float64)
    iterations = iterations[np.isfinite(iterations)]
    return int(iterations[-1]) if iterations.size else 0


class Checkpoint(NamedTuple):
    """A checkpoint read and verified (:meth:`RunDirectory.read_checkpoint`)."""

    path: Path
    meta: dict
    leaves: list  # the state's leaves (see flatten_state)
    trace: dict  # trace columns up to the checkpoint

    @property
    def iterations_done(self) -> int:
        return iterations_done(self.trace)


def _checksum(arrays: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        if name == CHECKSUM_MEMBER:
            continue
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _checkpoint_bytes(arrays: dict) -> bytes:
    arrays = dict(arrays)
    arrays[CHECKSUM_MEMBER] = np.frombuffer(_checksum(arrays).encode("ascii"), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def verify_checkpoint(path) -> Checkpoint:
    """Reads the checkpoint at ``path`` and checks its format version and checksum; raises
    ``ValueError`` saying what is wrong (the caller adds the ways on)."""
    path = Path(path)
    try:
        content = path.read_bytes()
    except OSError as error:
        raise ValueError(f"cannot be read ({error.strerror or error})") from None
    if not content:
        raise ValueError("is empty (0 bytes)")
    if not content.startswith(b"PK"):
        raise ValueError(f"is not a grepvi checkpoint (not an .npz archive; {len(content)} bytes)")
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except Exception as error:  # noqa: BLE001 - zipfile, zlib, numpy: each damage has its own error
        raise ValueError(
            f"is damaged ({len(content)} bytes; reading it failed: {type(error).__name__}: {error})"
        ) from None
    if "meta" not in arrays:
        raise ValueError("is damaged or not a grepvi checkpoint (it has no metadata)")
    try:
        meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("is damaged (its metadata is not valid JSON)") from None
    if not isinstance(meta, dict):
        raise ValueError("is damaged (its metadata is not a JSON object)")
    version = meta.get("format", 1)
    if not isinstance(version, int) or version > CHECKPOINT_FORMAT:
        raise ValueError(
            f"has format {version!r}; this grepvi reads formats up to {CHECKPOINT_FORMAT} "
            "(a newer grepvi wrote it)"
        )
    if version >= 2:
        stored = arrays.get(CHECKSUM_MEMBER)
        if stored is None:
            raise ValueError("is damaged (its checksum is missing)")
        if bytes(stored).decode("ascii", "replace") != _checksum(arrays):
            raise ValueError("is damaged (its content does not match its sha256 checksum)")
    leaves = [arrays[name] for name in sorted(n for n in arrays if n.startswith("state_"))]
    trace = {n[len("trace__") :]: arrays[n] for n in arrays if n.startswith("trace__")}
    return Checkpoint(path, meta, leaves, trace)


def _owned_names() -> set[str]:
    return set(RUN_FILES) | {MARKER_FILE, LOCK_FILE, CHECKPOINT_PREV_FILE} | set(RUN_FIGURES)


def _is_own_temporary(name: str) -> bool:
    """A temporary file of :func:`atomic_write_bytes` for one of grepvi's own files."""
    base = name.rsplit("/", 1)[-1]
    if not (base.startswith(".") and base.endswith(".tmp")):
        return False
    return base.startswith(".grepvi-write-test.") or any(
        base.startswith(f".{Path(own).name}.") for own in _owned_names()
    )


class RunDirectory:
    """The output folder of one run and the rules for reusing it.

    * grepvi writes only the files it owns (:data:`OWNED_FILES`) and only into a folder that is
      new, empty, or a run folder (marked by ``.grepvi-run``, or an older run's ``config.json``);
      any other folder is refused, and nothing but grepvi's own files is ever removed.
    * ``identity`` is the part of the configuration that determines the result (model, data,
      estimator, options, seed, budget); a folder holding a run with another identity is
      refused unless ``overwrite``; a folder holding any run is refused unless ``resume`` or
      ``overwrite``.
    * :meth:`acquire` takes an OS lock on ``.grepvi-lock`` (``fcntl.flock``) for the run's life:
      a second writer is refused with the first one's pid; the kernel drops the lock of a killed
      process, so a stale lock is taken over.
    * Checkpoints carry a format version and a sha256 checksum, are verified when read, and the
      previous one is kept as ``checkpoint.prev.npz``.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock_fd = None
        self._created_folder = False
        self._created_lock = False
        self._wrote = False
        self.stale_lock = None  # the holder written in a lock that was free when taken

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def figures(self) -> Path:
        return self.path / FIGURES_DIR

    # --- what the folder is ---------------------------------------------------------------
    def _legacy_run(self) -> bool:
        """A run of a grepvi before the marker file: its config.json names grepvi's versions."""
        path = self.file(CONFIG_FILE)
        if not path.is_file():
            return False
        try:
            config = read_json(path)
        except (ConfigError, OSError, UnicodeDecodeError):
            return False
        return isinstance(config, dict) and "identity" in config and "grepvi" in config.get("versions", {})

    def holds_run(self) -> bool:
        """The folder is a run folder (marker file, or an older grepvi run's config.json)."""
        return self.path.is_dir() and (self.file(MARKER_FILE).exists() or self._legacy_run())

    def foreign_entries(self) -> list[str]:
        """Entries of a folder that is not a run which grepvi would not have left there: all
        but its lock file, the temporaries of its atomic writes and an empty ``figures/``
        (a file named like a run file, ``config.json``, is a user's until the marker says
        otherwise)."""
        if not self.path.is_dir():
            return []
        foreign = []
        for entry in sorted(self.path.iterdir()):
            name = entry.name
            if name == FIGURES_DIR and entry.is_dir():
                foreign += [f"{FIGURES_DIR}/{e.name}" for e in sorted(entry.iterdir())]
            elif not (name == LOCK_FILE and entry.is_file()) and not _is_own_temporary(name):
                foreign.append(name + ("/" if entry.is_dir() else ""))
        return foreign

    def check(self, identity: dict, *, resume: bool, overwrite: bool) -> str:
        """Decides what to do with the folder; raises before anything is written.

        Returns "fresh" (new or empty folder, or ``overwrite`` of a run) or "resume".
        """
        if resume and overwrite:
            raise ConfigError("resume=True and overwrite=True exclude each other; pass one of them")
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderError(f"output {str(self.path)!r}: expected a folder, found a file")
        if not self.holds_run():
            foreign = self.foreign_entries()
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise RunFolderError(
                    f"output {str(self.path)!r} is a folder that grepvi did not make (it holds {shown}); "
                    "grepvi writes only into a new or empty folder or into a run folder of its own "
                    f"(marked by {MARKER_FILE}), and never removes other files"
                    + (" (overwrite=True replaces a grepvi run only)" if overwrite else "")
                    + "; choose another output folder"
                )
            if resume:
                raise ConfigError(
                    f"resume=True: {str(self.path)!r} holds no run to resume (no {CONFIG_FILE})"
                )
            return "fresh"
        if overwrite:
            return "fresh"
        config_path = self.file(CONFIG_FILE)
        if not config_path.exists():
            if not any(self.file(name).exists() for name in RUN_FILES + (CHECKPOINT_PREV_FILE,)):
                if resume:  # a run stopped before it wrote anything
                    raise ConfigError(
                        f"resume=True: {str(self.path)!r} holds no run to resume (no {CONFIG_FILE})"
                    )
                return "fresh"
            raise RunFolderError(
                f"output {str(self.path)!r} holds files of a run but no {CONFIG_FILE}; pass overwrite=True "
                "to replace them or choose another output folder"
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

    def check_writable(self) -> None:
        """Refuses (:class:`RunFolderError`) an output folder that cannot be made or written:
        a path under a file, a read-only folder. Writes nothing that stays."""
        probe = self.path
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            if probe == self.path:
                raise RunFolderError(f"output {str(self.path)!r}: expected a folder, found a file")
            raise RunFolderError(
                f"output {str(self.path)!r}: {str(probe)!r} is a file, so no folder can be made under it; "
                "choose another output folder"
            )
        try:
            handle, name = tempfile.mkstemp(prefix=".grepvi-write-test.", suffix=".tmp", dir=probe)
            os.close(handle)
            os.unlink(name)
        except OSError as error:
            raise RunFolderError(
                f"output {str(self.path)!r}: cannot write in {str(probe)!r} "
                f"({error.strerror or error}); choose a writable output folder"
            ) from None

    # --- the lock ---------------------------------------------------------------------------
    def acquire(self) -> None:
        """Creates the folder if needed and takes its lock for this process; refuses
        (:class:`RunFolderError`, naming the holder) when another process holds it."""
        import fcntl
        import socket

        if self._lock_fd is not None:
            return
        self._created_folder = not self.path.exists()
        self._created_lock = not self.file(LOCK_FILE).exists()
        self._wrote = False
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.file(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
        except OSError as error:
            raise RunFolderError(
                f"output {str(self.path)!r}: cannot create its lock file ({error.strerror or error}); "
                "choose a writable output folder"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            self._forget_created_folder()
            who = _describe_holder(holder)
            raise RunFolderError(
                f"output {str(self.path)!r} is in use by another grepvi process ({who}); wait for it to "
                f"end or stop it{' (kill ' + str(holder['pid']) + ')' if holder.get('pid') else ''}, "
                "or choose another output folder"
            ) from None
        except OSError:
            pass  # no lock support here (some network file systems): run without one
        holder = _read_holder(fd)
        self.stale_lock = holder if holder else None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv)[:500],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        self._lock_fd = fd

    def release(self) -> None:
        """Drops the lock. A run refused before it wrote anything leaves the folder as it found
        it: the lock file and a folder this process made are removed again."""
        import fcntl

        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        unused = not self._wrote
        try:
            if unused and self._created_lock:
                _unlink_quietly(self.file(LOCK_FILE))
            else:
                os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(fd)
        if unused:
            self._forget_created_folder()

    def _forget_created_folder(self) -> None:
        if self._created_folder:
            try:
                self.path.rmdir()  # only if empty
            except OSError:
                pass
            self._created_folder = False

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    # --- writing ------------------------------------------------------------------------------
    def clear(self) -> None:
        """Removes grepvi's own run files (results, checkpoints, its figures) from the folder;
        nothing else (a user's files, figures included, stay)."""
        for name in RUN_FILES + (CHECKPOINT_PREV_FILE,) + RUN_FIGURES:
            _unlink_quietly(self.file(name), missing_ok=True, quiet=False)
        if self.figures.is_dir():
            try:
                self.figures.rmdir()  # only if empty
            except OSError:
                pass

    def remove_stale_temporaries(self) -> list[str]:
        """Removes temporary files that an interrupted :func:`atomic_write_bytes` of one of
        grepvi's own files left behind (``.checkpoint.npz.<random>.tmp``); returns their names."""
        removed = []
        for folder in (self.path, self.figures):
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if entry.is_file() and _is_own_temporary(entry.name):
                    _unlink_quietly(entry)
                    removed.append(str(entry.relative_to(self.path)))
        return sorted(removed)

    def prepare(self) -> None:
        """Makes the folder a run folder (the marker file) and removes stale temporaries."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._wrote = True
        marker = self.file(MARKER_FILE)
        if not marker.exists():
            atomic_write_text(marker, json.dumps({"grepvi_run": RUN_FORMAT}) + "\n")
        self.remove_stale_temporaries()

    # checkpoints
    def save_checkpoint(self, state, trace: TraceRecorder, identity: dict, extra: dict) -> None:
        """Writes the checkpoint (atomically, with a format version and a sha256 checksum),
        keeping the previous one as ``checkpoint.prev.npz``; then the trace."""
        arrays = {f"state_{i:04d}": leaf for i, leaf in enumerate(flatten_state(state))}
        for name, values in trace.as_arrays().items():
            arrays[f"trace__{name}"] = values
        meta = {"format": CHECKPOINT_FORMAT, "identity": identity, **extra}
        arrays["meta"] = np.frombuffer(json.dumps(meta, default=_json_default).encode("utf-8"), np.uint8)
        content = _checkpoint_bytes(arrays)
        current = self.file(CHECKPOINT_FILE)
        if current.exists():  # the previous generation, kept while the new one is written
            _keep_copy(current, self.file(CHECKPOINT_PREV_FILE))
        atomic_write_bytes(current, content)
        atomic_write_text(self.file(TRACE_FILE), trace.to_csv())

    def _damaged(self, path: Path, problem: str) -> RunFolderError:
        previous = self.file(CHECKPOINT_PREV_FILE)
        ways = "start again with overwrite=True (this run's files are replaced)"
        if path != previous and previous.exists():
            try:
                kept = verify_checkpoint(previous)
            except ValueError as error:
                ways += f", or restore a backup (the previous checkpoint {previous} {error} too)"
            else:
                ways += (
                    f", or go back to the previous checkpoint (iteration {kept.iterations_done}): "
                    f"mv {previous} {path}, then resume=True"
                )
        else:
            ways += ", or restore it from a backup"
        return RunFolderError(f"{path}: the checkpoint {problem}; ways on: {ways}")

    def read_checkpoint(self) -> Checkpoint | None:
        """The verified checkpoint; None when the run has none and recorded no work (it stopped
        before its first checkpoint). Damage, or a missing checkpoint of a run whose trace or
        metrics say it did work, raise :class:`RunFolderError` with the ways on."""
        path = self.file(CHECKPOINT_FILE)
        if not path.exists():
            done = self._recorded_iterations()
            if self.file(CHECKPOINT_PREV_FILE).exists():
                raise self._damaged(path, "is missing")
            if done:
                raise self._damaged(path, f"is missing, but the run's files record {done} iterations")
            return None
        try:
            return verify_checkpoint(path)
        except ValueError as error:
            raise self._damaged(path, str(error)) from None

    def _recorded_iterations(self) -> int:
        done = 0
        if self.file(TRACE_FILE).exists():
            try:
                done = iterations_done(read_trace(self.file(TRACE_FILE)))
            except (OSError, ValueError, csv.Error):
                done = 1  # a trace that cannot be read still says the run did something
        if self.file(METRICS_FILE).exists():
            try:
                done = max(done, int(read_json(self.file(METRICS_FILE)).get("iterations") or 0))
            except (OSError, ValueError, TypeError, AttributeError):
                done = max(done, 1)
        return done

    @staticmethod
    def check_identity(checkpoint: Checkpoint, identity: dict) -> None:
        """Refuses a checkpoint written by another configuration."""
        differences = _differences(checkpoint.meta.get("identity", {}), identity)
        if differences:
            raise ConfigError(
                f"{checkpoint.path}: the checkpoint comes from another configuration "
                f"({'; '.join(differences)}); pass --overwrite to start again or use the options it was "
                "written with"
            )

    def restore(self, checkpoint: Checkpoint, template, identity: dict):
        """``(state, trace, meta)`` of a verified checkpoint, in the structure of ``template``;
        a checkpoint of another configuration is refused."""
        self.check_identity(checkpoint, identity)
        state = unflatten_state(template, checkpoint.leaves, str(checkpoint.path))
        trace = TraceRecorder(checkpoint.trace if checkpoint.trace else None)
        return state, trace, checkpoint.meta

    def checkpoint_meta(self) -> dict:
        """The verified checkpoint's metadata (``{}`` when the run has none yet)."""
        checkpoint = self.read_checkpoint()
        return {} if checkpoint is None else checkpoint.meta

    def load_checkpoint(self, template, identity: dict):
        """``(state, trace, meta)`` from the verified checkpoint, or None when there is none."""
        checkpoint = self.read_checkpoint()
        if checkpoint is None:
            return None
        return self.restore(checkpoint, template, identity)


def _read_holder(fd) -> dict:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        holder = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe_holder(holder: dict) -> str:
    if not holder.get("pid"):
        return "holder unknown"
    parts = [f"pid {holder['pid']}"]
    if holder.get("host"):
        parts.append(f"on {holder['host']}")
    if holder.get("started"):
        parts.append(f"since {holder['started']}")
    text = " ".join(parts)
    if holder.get("command"):
        text += f": {holder['command']}"
    return text


def _unlink_quietly(path: Path, missing_ok: bool = True, quiet: bool = True) -> None:
    try:
        path.unlink(missing_ok=missing_ok)
    except OSError:
        if not quiet:
            raise


def _keep_copy(source: Path, destination: Path) -> None:
    """``destination`` becomes a copy of ``source`` atomically (a hard link where the file system
    allows, else a copy), so ``source`` itself is never missing."""
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    _unlink_quietly(temporary)
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
    try:
        os.replace(temporary, destination)
    except BaseException:
        _unlink_quietly(temporary)
        raise

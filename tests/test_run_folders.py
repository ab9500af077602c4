"""Run folders that never lose, mix or silently redo work (issue 22).

Library-level checks of :mod:`grepvi.experiments.run_files` (the folder rules, the lock, verified checkpoints
with two generations, temporaries, strict JSON), the progress bar's rate when the output is not
a terminal, and the input validators at the API's boundary. The command-line side (exit codes,
messages, signals) is in ``tests/test_cli.py``.
"""

import fcntl
import io
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi import validation
from grepvi.errors import ConfigError, DataError, ModelError
from grepvi.estimators import get_estimator
from grepvi.experiments import observers as runs
from grepvi.experiments import run_files
from grepvi.families import Beta, Gamma
from grepvi.inference.state import init
from grepvi.optim.advi import advi_stepsize
from grepvi.target import Target


def _state():
    target = Target(lambda z: -jnp.sum(z["rate"]), {"rate": Gamma(shape=(2,))})
    return init(jax.random.key(0), target, advi_stepsize(0.1))


def _trace(n):
    trace = runs.TraceRecorder()
    trace.add({"iteration": np.arange(1, n + 1), "wall_time": np.arange(n) * 0.1, "elbo": -np.ones(n)})
    return trace


def _run_folder(tmp_path, checkpoints=(10, 20)):
    """A run folder with a config.json and a checkpoint written at each of ``checkpoints``."""
    directory = run_files.RunDirectory(tmp_path / "run")
    with directory:
        directory.prepare()
        run_files.write_json(directory.file("config.json"), {"identity": {"a": 1}})
        for n in checkpoints:
            directory.save_checkpoint(_state(), _trace(n), {"a": 1}, {"wall_time": n * 0.1})
    return directory


# --- the folder: only grepvi's own files -------------------------------------------------------------


def test_a_folder_that_is_not_a_run_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "thesis"
    (folder / "figures").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "figures" / "my_thesis_plot.png").write_bytes(b"png")
    directory = run_files.RunDirectory(folder)
    for overwrite in (False, True):
        with pytest.raises(run_files.RunFolderError, match="grepvi did not make.*notes.txt"):
            directory.check({"a": 1}, resume=False, overwrite=overwrite)
    assert sorted(p.name for p in folder.rglob("*")) == ["figures", "my_thesis_plot.png", "notes.txt"]
    # a user's own config.json does not make a folder a run
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"identity": {"a": 1}}')
    with pytest.raises(run_files.RunFolderError, match="did not make"):
        run_files.RunDirectory(tmp_path / "other").check({"a": 1}, resume=False, overwrite=True)


def test_empty_and_new_folders_are_fresh(tmp_path):
    (tmp_path / "empty").mkdir()
    assert run_files.RunDirectory(tmp_path / "empty").check({}, resume=False, overwrite=False) == "fresh"
    new = run_files.RunDirectory(tmp_path / "new" / "deep")
    assert new.check({}, resume=False, overwrite=False) == "fresh"


def test_clear_removes_only_grepvi_files(tmp_path):
    directory = _run_folder(tmp_path)
    (directory.figures).mkdir()
    (directory.figures / "elbo_vs_time.png").write_bytes(b"grepvi's")
    (directory.figures / "mine.png").write_bytes(b"user's")
    (directory.path / "notes.txt").write_text("mine")
    assert directory.check({"a": 1}, resume=False, overwrite=True) == "fresh"
    directory.clear()
    left = sorted(str(p.relative_to(directory.path)) for p in directory.path.rglob("*"))
    assert left == [".grepvi-lock", ".grepvi-run", "figures", "figures/mine.png", "notes.txt"]


def test_a_refused_run_leaves_a_new_folder_uncreated(tmp_path):
    directory = run_files.RunDirectory(tmp_path / "new")
    with pytest.raises(RuntimeError):
        with directory:
            raise RuntimeError("refused before writing")
    assert not (tmp_path / "new").exists()


def test_legacy_run_without_marker_is_recognized(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    run_files.write_json(folder / "config.json", {"identity": {"a": 1}, "versions": {"grepvi": "0.1"}})
    directory = run_files.RunDirectory(folder)
    assert directory.holds_run()
    assert directory.check({"a": 1}, resume=True, overwrite=False) == "resume"


# --- the lock ----------------------------------------------------------------------------------------


def test_second_writer_is_refused_naming_the_first(tmp_path):
    first = run_files.RunDirectory(tmp_path / "run")
    with first:
        holder = json.loads((tmp_path / "run" / ".grepvi-lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"]
        expected = f"in use by another grepvi process \\(pid {os.getpid()}"
        with pytest.raises(run_files.RunFolderError, match=expected):
            run_files.RunDirectory(tmp_path / "run").acquire()
    # released: the next writer gets it
    with run_files.RunDirectory(tmp_path / "run") as second:
        assert second.stale_lock is None


def test_a_stale_lock_after_a_kill_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".grepvi-lock").write_text(json.dumps({"pid": 999999, "host": "gone"}))  # no flock held
    with run_files.RunDirectory(folder) as directory:
        assert directory.stale_lock["pid"] == 999999
        assert json.loads((folder / ".grepvi-lock").read_text())["pid"] == os.getpid()


def test_the_lock_is_an_os_lock(tmp_path):
    """Another open file description cannot take the lock while the run holds it (flock)."""
    with run_files.RunDirectory(tmp_path / "run"):
        fd = os.open(tmp_path / "run" / ".grepvi-lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


# --- checkpoints ---------------------------------------------------------------------------------------


def _damage(path, how):
    content = path.read_bytes()
    if how == "truncated":
        path.write_bytes(content[: len(content) // 2])
    elif how == "bit-flipped":
        flipped = bytearray(content)
        flipped[len(content) // 2] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(len(content)))
    elif how == "pickled object":
        buffer = io.BytesIO()
        np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        path.write_bytes(buffer.getvalue())


DAMAGE = ["truncated", "bit-flipped", "empty", "random bytes", "pickled object"]


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_checkpoint_is_refused_with_the_previous_generation_offered(tmp_path, how):
    directory = _run_folder(tmp_path)
    path = directory.file("checkpoint.npz")
    _damage(path, how)
    with pytest.raises(run_files.RunFolderError) as error:
        directory.read_checkpoint()
    message = str(error.value)
    assert message.startswith(f"{path}: the checkpoint ")
    assert "overwrite=True" in message
    assert f"previous checkpoint (iteration 10): mv {directory.file('checkpoint.prev.npz')} {path}" in message
    assert "pickle" not in message.lower()
    # following the advice works
    os.replace(directory.file("checkpoint.prev.npz"), path)
    assert directory.read_checkpoint().iterations_done == 10


def test_a_flip_that_keeps_the_archive_readable_fails_the_checksum(tmp_path):
    directory = _run_folder(tmp_path, checkpoints=(20,))
    path = directory.file("checkpoint.npz")
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["state_0000"] = arrays["state_0000"] + 1  # a consistent zip, a different content
    np.savez(path, **arrays)
    with pytest.raises(run_files.RunFolderError, match="does not match its sha256 checksum"):
        directory.read_checkpoint()


def test_two_generations_are_kept(tmp_path):
    directory = _run_folder(tmp_path, checkpoints=(10, 20, 30))
    assert directory.read_checkpoint().iterations_done == 30
    assert run_files.verify_checkpoint(directory.file("checkpoint.prev.npz")).iterations_done == 20


def test_missing_checkpoint_of_a_run_that_did_work_is_refused(tmp_path):
    directory = _run_folder(tmp_path, checkpoints=(10,))
    directory.file("checkpoint.npz").unlink()
    expected = "is missing, but the run's files record 10 iterations"
    with pytest.raises(run_files.RunFolderError, match=expected):
        directory.read_checkpoint()
    directory.file("trace.csv").unlink()
    assert directory.read_checkpoint() is None  # stopped before its first checkpoint: start at 0


def test_checkpoint_of_a_newer_format_is_refused(tmp_path):
    directory = _run_folder(tmp_path, checkpoints=(10,))
    path = directory.file("checkpoint.npz")
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["format"] = 99
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    path.write_bytes(run_files._checkpoint_bytes(arrays))
    with pytest.raises(run_files.RunFolderError, match="has format 99"):
        directory.read_checkpoint()


def test_stale_temporaries_of_grepvi_files_are_removed_on_start(tmp_path):
    directory = _run_folder(tmp_path, checkpoints=(10,))
    (directory.path / ".checkpoint.npz.abc123.tmp").write_bytes(b"half")
    (directory.path / ".trace.csv.xyz.tmp").write_bytes(b"half")
    (directory.path / ".my-editor.swp.tmp").write_bytes(b"not grepvi's")
    with directory:
        directory.prepare()
    names = sorted(os.listdir(directory.path))
    assert ".checkpoint.npz.abc123.tmp" not in names and ".trace.csv.xyz.tmp" not in names
    assert ".my-editor.swp.tmp" in names


def test_failing_cleanup_does_not_hide_the_first_write_error(tmp_path, monkeypatch):
    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    def broken_unlink(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(run_files.os, "replace", broken_replace)
    monkeypatch.setattr(run_files.os, "unlink", broken_unlink)
    with pytest.raises(OSError, match="No space left"):
        run_files.atomic_write_bytes(tmp_path / "x", b"data")


def test_writability_is_checked(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(run_files.RunFolderError, match="is a file, so no folder can be made under it"):
        run_files.RunDirectory(tmp_path / "file" / "run").check_writable()
    run_files.RunDirectory(tmp_path / "new" / "run").check_writable()
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(run_files.RunFolderError, match="cannot write in"):
            run_files.RunDirectory(folder / "run").check_writable()
    finally:
        folder.chmod(0o755)


# --- counting, JSON ------------------------------------------------------------------------------------


def test_remaining_steps_counts_the_runs_iterations():
    assert run_files.remaining_steps(1000, 200) == 800
    assert run_files.remaining_steps(1000, 1000) == 0
    assert run_files.remaining_steps(1000, 1800) == 0  # never negative
    assert run_files.remaining_steps(None, 5) is None
    trace = _trace(40).as_arrays()
    assert run_files.iterations_done(trace) == 40 and run_files.iterations_done({}) == 0


def test_metrics_json_is_strict(tmp_path):
    def strict(text):
        def refuse(constant):
            raise ValueError(f"not JSON: {constant}")

        return json.loads(text, parse_constant=refuse)

    values = {
        "final_elbo": float("-inf"),
        "a": float("nan"),
        "b": np.float32(np.inf),
        "c": [1.0, float("nan")],
        "d": {"e": np.float64("nan")},
        "refit_final_elbo": None,
        "refit_final_elbo_note": "not computed: --refit-steps 0",
        "n": np.int64(3),
    }
    run_files.write_json(tmp_path / "m.json", values)
    parsed = strict((tmp_path / "m.json").read_text())
    assert parsed["final_elbo"] is None and parsed["final_elbo_note"] == "not finite (-inf)"
    assert parsed["a"] is None and parsed["b"] is None and parsed["c"] == [1.0, None]
    assert parsed["d"] == {"e": None, "e_note": "not finite (nan)"}
    assert parsed["refit_final_elbo_note"] == "not computed: --refit-steps 0" and parsed["n"] == 3


# --- progress output ------------------------------------------------------------------------------------


def test_progress_to_a_non_terminal_grows_with_time_not_speed():
    """Thousands of updates in a few seconds write a few lines at most (one per LOG_INTERVAL)."""
    from grepvi.progress import LOG_INTERVAL, progress_bar

    stream = io.StringIO()  # not a terminal
    start = time.monotonic()
    bar = progress_bar(100_000, description="fit", file=stream)
    for _ in range(20_000):
        bar.update(1)
        bar.set_postfix(elbo="-1.0", time="0s")  # refreshes by default: rate-limited too
    bar.close()
    elapsed = time.monotonic() - start
    lines = stream.getvalue().count("\r") + stream.getvalue().count("\n")
    assert lines <= elapsed / LOG_INTERVAL + 4, (lines, elapsed)
    assert len(stream.getvalue()) < 2000


# --- inputs at the boundary ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["abc", 1.5, 2**70, -1, True, None, 2**32])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ConfigError, match="seed: expected an integer in \\[0, 2\\*\\*32\\)"):
        validation.seed(seed)


def test_good_seeds():
    assert validation.seed(0) == 0 and validation.seed(np.int64(7)) == 7 and validation.seed(3.0) == 3
    assert validation.seed(2**32 - 1) == 2**32 - 1


def _poisson_density(z):
    return jnp.sum(3.0 * jnp.log(z["rate"]) - 2.0 * z["rate"])


@pytest.mark.parametrize("seed", ["abc", 1.5, 2**70])
def test_fit_refuses_bad_seeds(seed):
    import grepvi

    with pytest.raises(ConfigError, match="seed: expected an integer"):
        grepvi.fit(
            _poisson_density, {"rate": Gamma()}, seed=seed, step_size=0.1, num_steps=10, progress=False
        )


@pytest.mark.parametrize("shape", ["abc", "12", 1.5, (2.5,), (0,), (-1, 2), [2, "a"], None])
def test_family_shapes_must_be_tuples_of_positive_ints(shape):
    with pytest.raises(ModelError, match="shape: expected a tuple of positive integers"):
        Gamma(shape=shape)
    with pytest.raises(ModelError, match="Beta: shape"):
        Beta(shape=shape)


def test_family_shapes_accepted():
    assert Gamma(shape=3).shape == (3,) and Gamma(shape=[2, 2]).shape == (2, 2) and Gamma().shape == ()
    assert Gamma(shape=(np.int64(2),)).shape == (2,)


@pytest.mark.parametrize("data", ["hello", {"x": "hello"}, {"x": [object()]}, {}])
def test_fit_refuses_data_that_is_not_a_pytree_of_arrays(data):
    import grepvi

    with pytest.raises(DataError, match="data.*expected a"):
        grepvi.fit(
            lambda z, d: _poisson_density(z), {"rate": Gamma()}, data=data, step_size=0.1, num_steps=5,
            progress=False,
        )  # fmt: skip


def test_data_pytrees_accepted():
    assert validation.data_pytree({"x": np.ones(3), "n": 5}) is not None
    assert validation.data_pytree(None) is None


@pytest.mark.parametrize(
    ("density", "message"),
    [
        (lambda z: None, "logdensity_fn returned None"),
        (lambda z: jnp.sum(z["rate"]).astype(jnp.int32) * 0 + jnp.int32(7), "dtype int32"),
        (lambda z: 3, "logdensity_fn returned (int|a value of dtype int32)"),  # compiled: an int32
        (lambda z: z["rate"] * jnp.ones(2), "must return a scalar"),
    ],
)
def test_density_must_return_a_floating_scalar(density, message):
    import grepvi

    with pytest.raises(ModelError, match=message):
        grepvi.fit(density, {"rate": Gamma()}, step_size=0.1, num_steps=5, progress=False)


def test_validators_in_grepvi_words():
    assert validation.positive_int(3.0, "n") == 3
    for bad in (0, -1, 1.5, True, "3", None):
        with pytest.raises(ConfigError, match="n: expected a positive integer"):
            validation.positive_int(bad, "n")
    assert validation.positive_float(0.5, "eta") == 0.5
    for bad in (0, -1.0, float("nan"), float("inf"), "abc", True):
        with pytest.raises(ConfigError, match="eta: expected a positive number"):
            validation.positive_float(bad, "eta")
    assert validation.non_negative_int(0, "k") == 0
    with pytest.raises(ConfigError, match="k: expected a non-negative integer"):
        validation.non_negative_int(-1, "k")


def test_the_estimators_still_run_with_the_shared_validators():
    assert get_estimator("grep", num_samples=2).options["num_samples"] == 2

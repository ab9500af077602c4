"""Run folders: atomic writes, the trace file, state (de)serialization, the folder rules, and the
chunked loop's independence of where it was stopped."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi.errors import ConfigError
from grepvi.estimators import get_estimator
from grepvi.experiments import observers as runs
from grepvi.experiments import run_files
from grepvi.families import Gamma
from grepvi.inference.state import init
from grepvi.optim.advi import advi_stepsize
from grepvi.target import Target


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "file.bin"
    run_files.atomic_write_bytes(path, b"old")
    run_files.atomic_write_bytes(path, b"new content")
    assert path.read_bytes() == b"new content"
    assert sorted(os.listdir(tmp_path)) == ["file.bin"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.npz"
    run_files.atomic_write_bytes(path, b"old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(run_files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        run_files.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.npz"]


def test_trace_csv_round_trip_with_sparse_columns(tmp_path):
    trace = run_files.TraceRecorder()
    trace.add(
        {"iteration": np.array([1, 2]), "wall_time": np.array([0.1, 0.2]), "elbo": np.array([-5.0, -4.0])}
    )
    trace.add({"iteration": np.array([3]), "wall_time": np.array([0.3]), "elbo": np.array([-3.5])})
    trace.set_last("perplexity", 123.5)
    text = trace.to_csv()
    assert text.splitlines()[0] == "iteration,wall_time,elbo,perplexity"
    assert text.splitlines()[1] == "1,0.1,-5.0,"
    (tmp_path / "trace.csv").write_text(text)
    back = run_files.read_trace(tmp_path / "trace.csv")
    np.testing.assert_array_equal(back["iteration"], [1, 2, 3])
    np.testing.assert_array_equal(back["elbo"], [-5.0, -4.0, -3.5])
    assert np.isnan(back["perplexity"][:2]).all() and back["perplexity"][2] == 123.5


def test_median_time_per_iteration_from_wall_times():
    wall = np.array([1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0])
    assert runs.median_time_per_iteration({"wall_time": wall}) == pytest.approx(0.5)


def _toy():
    counts = jnp.array([3.0, 5.0, 4.0, 0.0])
    logdensity = lambda z: (
        jnp.sum(-z["rate"] + (0.1 - 1.0) * jnp.log(z["rate"]))
        + jnp.sum(counts[:, None] * jnp.log(z["rate"]) - z["rate"])
    )
    return Target(logdensity, {"rate": Gamma(shape=(2,))})


def test_state_round_trip_and_mismatch(tmp_path):
    target = _toy()
    optimizer = advi_stepsize(0.5)
    state = init(jax.random.key(3), target, optimizer)
    leaves = run_files.flatten_state(state)
    back = run_files.unflatten_state(state, leaves, "test")
    np.testing.assert_array_equal(jax.random.key_data(back.rng_key), jax.random.key_data(state.rng_key))
    for a, b in zip(
        jax.tree_util.tree_leaves(back.params), jax.tree_util.tree_leaves(state.params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    other = init(jax.random.key(3), Target(target.logdensity_fn, {"rate": Gamma(shape=(3,))}), optimizer)
    with pytest.raises(ConfigError, match="different configuration"):
        run_files.unflatten_state(other, leaves, "test")
    with pytest.raises(ConfigError, match="holds 1 arrays"):
        run_files.unflatten_state(state, leaves[:1], "test")


def _advi():
    # ADVI: the loop's logic is the estimator's business only through ``step``; ADVI compiles fast.
    estimator = get_estimator("advi", num_elbo_samples=0)
    target = _toy()
    return target._replace(families=estimator.adapt_families(target.families)), estimator


def test_run_directory_rules(tmp_path):
    directory = run_files.RunDirectory(tmp_path / "run")
    assert directory.check({"a": 1}, resume=False, overwrite=False) == "fresh"
    with pytest.raises(ConfigError, match="holds no run to resume"):
        directory.check({"a": 1}, resume=True, overwrite=False)
    directory.prepare()
    run_files.write_json(directory.file("config.json"), {"identity": {"a": 1}})
    with pytest.raises(ConfigError, match="already holds a run with this configuration; pass resume=True"):
        directory.check({"a": 1}, resume=False, overwrite=False)
    with pytest.raises(ConfigError, match="already holds a different run.*a: 1 there, 2 now"):
        directory.check({"a": 2}, resume=False, overwrite=False)
    with pytest.raises(ConfigError, match="another configuration"):
        directory.check({"a": 2}, resume=True, overwrite=False)
    assert directory.check({"a": 1}, resume=True, overwrite=False) == "resume"
    assert directory.check({"a": 2}, resume=False, overwrite=True) == "fresh"
    (directory.path / "notes.txt").write_text("mine")
    directory.clear()
    assert sorted(os.listdir(directory.path)) == [".grepvi-run", "notes.txt"]  # only the run's own files go
    file = tmp_path / "plain"
    file.write_text("x")
    with pytest.raises(ConfigError, match="expected a folder"):
        run_files.RunDirectory(file).check({}, resume=False, overwrite=False)


def test_save_and_load_params(tmp_path):
    params = {
        "W0": {"mean": jnp.arange(3.0), "concentration": jnp.ones(3)},
        "z1": {"mean": jnp.zeros((2, 2))},
    }
    run_files.save_params(tmp_path / "params.npz", params)
    back = run_files.load_params(tmp_path / "params.npz")
    assert sorted(back) == ["W0/concentration", "W0/mean", "z1/mean"]
    np.testing.assert_array_equal(back["W0/mean"], [0.0, 1.0, 2.0])


def test_environment_versions_are_json():
    versions = run_files.environment_versions()
    assert {"python", "jax", "jaxlib", "grepvi"} <= set(versions)
    json.dumps(versions)

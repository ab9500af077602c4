"""Reliability: refused inputs through the command line, determinism, and a tiny NaN sweep.

Every bad input must give exit status 2, a message naming the argument, what was expected and
what was found, no Python traceback, and leave an existing output folder as it was (here: a
finished run in ``--out``, passed with ``--overwrite`` so that nothing but the refusal protects
it). ``python tests/test_reliability.py`` prints the case -> message table of
``docs/reliability.md``.

Covered elsewhere (not repeated here):

* library-level ``DataError`` messages of every loader (``tests/test_data.py``:
  ``test_missing_file_names_path_and_how_to_set_the_folder``, ``test_file_of_another_format``,
  ``test_truncated_files``, ``test_truncated_docword``, ``test_images_with_inconsistent_shapes``,
  ``test_bad_counts_for_poisson``, ``test_non_binary_data_for_bernoulli``,
  ``test_overlapping_or_empty_splits``); here the same cases go through ``grepvi fit``;
* an output folder holding a different run / the same run without ``--resume`` / a ``--resume``
  with other options, and a checkpoint from another configuration: ``tests/test_cli.py``
  (``test_refusals_exit_2_with_a_message_and_leave_output_alone``,
  ``test_checkpoint_from_another_configuration_is_refused``); repeated here once each only to
  record their messages (cheap: refused before anything is compiled);
* a traceback-free refusal from a real subprocess:
  ``tests/test_cli.py::test_subprocess_refusal_has_no_traceback``;
* SIGKILL then ``--resume`` bitwise equal, SIGINT writes a checkpoint and the metrics:
  ``tests/test_cli.py``; same seed same trace (library): ``tests/test_fit.py::test_same_seed_same_trace``;
  config.json holds the seed and the versions of python, jax, jaxlib, grepvi:
  ``tests/test_cli.py::test_fit_writes_config_trace_metrics_and_figures``.
"""

import contextlib
import csv
import hashlib
import importlib.util
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from grepvi import cli

CACHE = os.path.join(tempfile.gettempdir(), "grepvi-test-jax-cache")
os.environ.setdefault("GREPVI_COMPILATION_CACHE", CACHE)
REPO = Path(__file__).resolve().parent.parent

TINY = [
    "--dataset",
    "synthetic",
    "--synthetic-size",
    "30,10,16",
    "--layer-sizes",
    "3,2",
    "--num-factors",
    "3",
    "--eval-samples",
    "5",
    "--refit-steps",
    "0",
    "--quiet",
]


def _main(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # main() returns its code; argparse paths may still exit
            code = exit_.code
    return code, err.getvalue()


def _digest(folder: Path) -> dict:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _write_data_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "junk.npz").write_bytes(b"this is not an array file, just some text\n" * 4)
    np.savez(folder / "truncated.npz", counts=np.ones((50, 40), np.int64))
    content = (folder / "truncated.npz").read_bytes()
    (folder / "truncated.npz").write_bytes(content[: len(content) // 2])
    for name, value in (("negative", -2.0), ("fractional", 2.5), ("nan", np.nan)):
        counts = np.ones((8, 4))
        counts[1, 2] = value
        np.savez(folder / f"{name}.npz", counts=counts)
    np.savez(folder / "grey.npz", images=np.full((8, 2, 2), 3))
    np.savez(folder / "half.npz", images=np.full((8, 2, 2), 0.5))
    np.savez(folder / "mixed.npz", images=np.zeros((4, 3, 3)), test_images=np.zeros((2, 3, 4)))
    counts = np.ones((6, 3), np.int64)
    np.savez(folder / "overlap.npz", counts=counts, train_idx=[0, 1, 2], test_idx=[2, 3])
    np.savez(folder / "empty.npz", counts=counts, test_idx=np.array([], np.int64))


SGD = "sparse-gamma-def"
BGMF = "beta-gamma-mf"

# id -> (model, dataset file in the data folder ("name:x": the name x; None: synthetic), extra
# options, text the message must contain)
CASES = {
    "data file does not exist": (SGD, "missing.npz", [], "expected an existing file, found none"),
    "data file not a valid array file": (SGD, "junk.npz", [], "the file is of another format"),
    "data file truncated": (SGD, "truncated.npz", [], "not its end: the file is truncated"),
    "negative counts, Poisson": (SGD, "negative.npz", [], "found negative counts"),
    "fractional counts, Poisson": (SGD, "fractional.npz", [], "found fractional counts"),
    "NaN counts, Poisson": (SGD, "nan.npz", [], "found NaN"),
    "non-binary data (counts), Bernoulli": (BGMF, "grey.npz", [], "expected binary values in {0, 1}"),
    "non-binary data (fractions), Bernoulli": (BGMF, "half.npz", [], "for the Bernoulli likelihood"),
    "images of inconsistent shapes": (BGMF, "mixed.npz", [], "inconsistent shapes"),
    "test split overlaps train split": (SGD, "overlap.npz", [], "expected disjoint train and test rows"),
    "test split empty": (SGD, "empty.npz", [], "empty test split"),
    "unknown model": ("deep-net", None, [], "unknown model 'deep-net'"),
    "unknown dataset name": (SGD, "name:mnsit", [], "data set 'mnsit': expected one of olivetti"),
    "unknown estimator": (SGD, None, ["--estimator", "magic"], "unknown estimator 'magic'"),
    "step size zero": (SGD, None, ["--step-size", "0"], "--step-size: expected a positive number"),
    "step size negative": (SGD, None, ["--step-size", "-0.5"], "--step-size: expected a positive number"),
    "step size NaN": (SGD, None, ["--step-size", "nan"], "--step-size: expected a positive number"),
    "time budget zero": (SGD, None, ["--time-budget", "0"], "--time-budget: expected a positive number"),
    "time budget negative": (SGD, None, ["--time-budget", "-3"], "--time-budget: expected a positive number"),
    "num steps zero": (SGD, None, ["--num-steps", "0"], "--num-steps: expected a positive integer"),
    "num steps negative": (SGD, None, ["--num-steps", "-5"], "--num-steps: expected a positive integer"),
    "sample count zero": (SGD, None, ["--num-samples", "0"], "--num-samples: expected a positive integer"),
    "sample count negative": (
        SGD,
        None,
        ["--num-samples", "-2"],
        "--num-samples: expected a positive integer",
    ),
    "sample count fractional": (
        SGD,
        None,
        ["--num-samples", "1.5"],
        "argument --num-samples: expected an integer, found '1.5'",
    ),
    "step size not a number": (SGD, None, ["--step-size", "abc"], "expected a number, found 'abc'"),
    "ELBO sample count zero": (SGD, None, ["--elbo-samples", "0"], "--elbo-samples"),
}


def _argv(case, data_dir: Path, out: Path, overwrite=True):
    model, dataset, extra, _ = CASES[case]
    argv = ["fit", *TINY, "--model", model, "--out", str(out)]
    if dataset is not None:
        name = dataset[len("name:") :] if dataset.startswith("name:") else str(data_dir / dataset)
        argv[argv.index("synthetic")] = name
    if "--estimator" not in extra:
        argv += ["--estimator", "advi"]
    if "--num-steps" not in extra and "--time-budget" not in extra:
        argv += ["--num-steps", "10"]
    return argv + extra + (["--overwrite"] if overwrite else [])


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny ADVI run (10 iterations, checkpoint at 10) and the bad data files."""
    root = tmp_path_factory.mktemp("reliability")
    _write_data_files(root / "data")
    out = root / "run"
    code, err = _main(["fit", *TINY, "--model", SGD, "--estimator", "advi", "--num-steps", "10",
                       "--checkpoint-every", "10", "--out", str(out)])  # fmt: skip
    assert code == 0, err
    return root, out


def _check_refusal(code, err, expected, context):
    assert code == 2, (context, code, err)
    assert "Traceback" not in err, err
    message = err.strip().splitlines()[-1] if err.strip() else ""
    assert message.startswith("grepvi"), (context, err)
    assert expected in err, (context, err)
    return message


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_a_message_and_leaves_the_output(finished, case):
    root, out = finished
    before = _digest(out)
    code, err = _main(_argv(case, root / "data", out))
    _check_refusal(code, err, CASES[case][3], case)
    assert _digest(out) == before
    fresh = root / f"fresh-{abs(hash(case))}"
    code, err = _main(_argv(case, root / "data", fresh, overwrite=False))
    _check_refusal(code, err, CASES[case][3], case)
    assert not fresh.exists(), "a refused run created its output folder"


# Refusals about the output folder (also in tests/test_cli.py; here for their messages).
FOLDER_CASES = {
    "output folder holds a different run": (["--seed", "1"], "already holds a different run"),
    "output folder holds the same run (no --resume)": ([], "already holds a run with this configuration"),
    "--resume with another configuration": (["--seed", "1", "--resume"], "another configuration"),
    "--resume and --overwrite together": (["--resume", "--overwrite"], "--overwrite"),
}


@pytest.mark.parametrize("case", list(FOLDER_CASES))
def test_output_folder_refusals(finished, case):
    root, out = finished
    before = _digest(out)
    extra, expected = FOLDER_CASES[case]
    code, err = _main(["fit", *TINY, "--model", SGD, "--estimator", "advi", "--num-steps", "10",
                       "--out", str(out), *extra])  # fmt: skip
    _check_refusal(code, err, expected, case)
    assert _digest(out) == before


def test_checkpoint_from_another_configuration(finished, tmp_path):
    # Also tests/test_cli.py::test_checkpoint_from_another_configuration_is_refused (ADVI runs there).
    root, out = finished
    other = tmp_path / "other"
    argv = ["fit", *TINY, "--model", SGD, "--estimator", "advi", "--checkpoint-every", "10"]
    code, err = _main([*argv, "--num-steps", "10", "--step-size", "0.05", "--out", str(other)])
    assert code == 0, err
    victim = tmp_path / "victim"
    victim.mkdir()
    for path in out.iterdir():
        if path.is_file() and path.name != "metrics.json":  # as if killed before finishing
            (victim / path.name).write_bytes(path.read_bytes())
    (victim / "checkpoint.npz").write_bytes((other / "checkpoint.npz").read_bytes())
    before = _digest(victim)
    code, err = _main([*argv, "--num-steps", "10", "--out", str(victim), "--resume"])
    _check_refusal(code, err, "checkpoint comes from another configuration", "checkpoint")
    assert _digest(victim) == before


# --- determinism: what tests/test_cli.py and tests/test_fit.py do not check ---------------------


def test_config_records_the_seed_given_and_the_running_versions(finished, tmp_path):
    import jax
    import jaxlib

    import grepvi

    _, out = finished
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 0
    versions = config["versions"]
    assert versions["jax"] == jax.__version__
    assert versions["jaxlib"] == jaxlib.__version__
    assert versions["grepvi"] == grepvi.__version__


def test_same_seed_same_trace_and_parameters_from_the_command_line(finished, tmp_path):
    """Two fresh CLI runs with the same options: the same ELBO trace and bitwise the same parameters."""
    _, out = finished
    again = tmp_path / "again"
    code, err = _main(["fit", *TINY, "--model", SGD, "--estimator", "advi", "--num-steps", "10",
                       "--checkpoint-every", "10", "--out", str(again)])  # fmt: skip
    assert code == 0, err

    def elbos(folder):
        with open(folder / "trace.csv", newline="") as file:
            return [row["elbo"] for row in csv.DictReader(file)]

    assert elbos(again) == elbos(out)
    with np.load(out / "params.npz") as a, np.load(again / "params.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# --- NaN sweep, tiny -----------------------------------------------------------------------------


def _nan_sweep_module():
    spec = importlib.util.spec_from_file_location("nan_sweep", REPO / "benchmarks" / "nan_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grep", "bbvi", "advi", "implicit", "rsvi"])
@pytest.mark.parametrize("model_name", [SGD, BGMF])
def test_tiny_nan_sweep_no_nonfinite_parameters(model_name, estimator):
    """The sweep of benchmarks/nan_sweep.py on simulated data (2 seeds x 30 iterations)."""
    import jax

    from grepvi.models import beta_gamma_mf, sparse_gamma_def

    sweep = _nan_sweep_module()
    zeros = np.zeros((12, 16), np.float32)
    if model_name == SGD:
        data, _ = sparse_gamma_def(zeros, layer_sizes=(4, 2)).sample(jax.random.key(0))
        data = np.minimum(np.asarray(data), 1e4)  # the paper's priors give a few huge counts
    else:
        data, _ = beta_gamma_mf(zeros, num_factors=4).sample(jax.random.key(0))
    model = sweep.build(model_name, np.asarray(data, np.float32), (4, 2), 4)
    cell = sweep.sweep_cell(model, estimator, 1.0, seeds=2, iterations=30)
    assert cell["nonfinite_params"] == 0, cell


def messages(folder: Path | None = None) -> list[tuple[str, str]]:
    """(case, message) for every refusal above, for docs/reliability.md."""
    folder = Path(folder or tempfile.mkdtemp(prefix="grepvi-reliability-"))
    _write_data_files(folder / "data")
    rows = []
    for case in CASES:
        code, err = _main(_argv(case, folder / "data", folder / "new", overwrite=False))
        rows.append((case, f"[{code}] " + err.strip().splitlines()[-1]))
    return rows


if __name__ == "__main__":
    for case, message in messages(sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"| {case} | `{message}` |")

"""``batch_size="auto"`` (:mod:`grepvi.inference.batch_size`): every row unless a full-data
step is large, then the most rows whose step stays within a flop budget.

The claims tested: the traced cost of a minibatch estimate is affine in its rows (the model
the choice rests on), the chosen batch is the largest within the budget, small models and
accelerators keep every row, and ``fit`` and the command line run what was chosen and say so.
"""

import json

import jax
import numpy as np
import pytest

import grepvi
from grepvi import cli
from grepvi.errors import ConfigError
from grepvi.estimators.base import get_estimator
from grepvi.inference import batch_size
from grepvi.models import beta_gamma_mf, sparse_gamma_def


def _mf(rows=2048, columns=64, factors=5):
    data = (np.random.default_rng(0).random((rows, columns)) < 0.3).astype(np.float32)
    return beta_gamma_mf(data, factors)


def _families(model, estimator):
    return estimator.adapt_families(model.latents())


@pytest.mark.parametrize("name", ["mf", "def"])
def test_estimate_flops_grow_with_the_rows_nearly_affinely(name):
    """The rule extrapolates ``G + r B`` from traces at ``N`` and ``N / 4`` rows. The count
    rises with the rows and the line through those two predicts the count at ``N / 2`` within
    20% (a sampler's count per element changes with its elements a call: 6% and 15% off
    here); ``r`` is positive. A size, not a timing (:mod:`grepvi.inference.cost`)."""
    rows = 2048
    if name == "mf":
        model = _mf(rows=rows)
    else:
        counts = np.random.default_rng(1).poisson(2.0, (rows, 32)).astype(np.float32)
        model = sparse_gamma_def(counts, layer_sizes=(4, 3))
    estimator = get_estimator("grep")
    families = _families(model, estimator)
    sizes = np.array([rows // 4, rows // 2, rows])
    flops = np.array([batch_size.estimate_flops(model, families, estimator, int(b)) for b in sizes])
    assert np.all(np.diff(flops) > 0)
    slope = (flops[2] - flops[0]) / (sizes[2] - sizes[0])
    predicted = flops[0] + slope * (sizes[1] - sizes[0])
    assert abs(flops[1] - predicted) <= 0.20 * flops[1]


def test_small_models_keep_every_row():
    """The tests' and examples' sizes (and MNIST's, Olivetti's: ``docs/performance.md``) run
    full batch: ``auto`` is ``None`` and ``fit`` reports it."""
    model = _mf(rows=300)
    estimator = get_estimator("grep")
    assert batch_size.automatic_batch_size(model, _families(model, estimator), estimator) is None
    result = grepvi.fit(model, num_steps=20, optimizer=__import__("optax").adam(0.01), progress=False)
    assert result.batch_size is None


def test_large_step_gets_the_most_rows_within_the_budget(monkeypatch):
    """With the full-data estimate over the limit, the batch is the most rows ``B`` whose
    ``G + r B`` (the line through the traces at ``N`` and ``N / 4``) stays within
    ``BATCH_FLOPS``: ``B + 1`` rows would not; the traced count at ``B`` is within 20% of
    the line's. An accelerator allows ``ACCELERATOR_FACTOR`` times the flops: the same model
    keeps every row there."""
    rows = 2048
    model = _mf(rows=rows)
    estimator = get_estimator("grep")
    families = _families(model, estimator)
    full = batch_size.estimate_flops(model, families, estimator, rows)
    quarter = batch_size.estimate_flops(model, families, estimator, rows // 4)
    per_row = (full - quarter) / (rows - rows // 4)
    fixed = full - per_row * rows
    budget = fixed + per_row * 400.5  # the most rows within it: 400
    monkeypatch.setattr(batch_size, "MAX_FULL_BATCH_FLOPS", full / 2)
    monkeypatch.setattr(batch_size, "BATCH_FLOPS", budget)
    chosen = batch_size.automatic_batch_size(model, families, estimator, platform="cpu")
    assert chosen == 400
    traced = batch_size.estimate_flops(model, families, estimator, chosen)
    assert abs(traced - (fixed + per_row * chosen)) <= 0.20 * traced
    assert batch_size.automatic_batch_size(model, families, estimator, platform="gpu") is None


def test_batch_is_bounded_by_the_rows(monkeypatch):
    """At least MIN_BATCH_ROWS rows, at most a quarter of them; none where a quarter is fewer
    than MIN_BATCH_ROWS (the model is then small enough to fit whole)."""
    model = _mf()
    estimator = get_estimator("grep")
    families = _families(model, estimator)
    monkeypatch.setattr(batch_size, "MAX_FULL_BATCH_FLOPS", 1.0)
    monkeypatch.setattr(batch_size, "BATCH_FLOPS", 1.0)  # below the globals' own cost
    assert batch_size.automatic_batch_size(model, families, estimator, "cpu") == batch_size.MIN_BATCH_ROWS
    monkeypatch.setattr(batch_size, "BATCH_FLOPS", 1e15)
    assert batch_size.automatic_batch_size(model, families, estimator, "cpu") == 2048 // 4
    small = _mf(rows=4 * batch_size.MIN_BATCH_ROWS - 1)
    assert batch_size.automatic_batch_size(small, _families(small, estimator), estimator, "cpu") is None


@pytest.mark.slow  # 29 s on CI; the batch rule's own tests stay in the fast tier
def test_fit_runs_the_chosen_batch(monkeypatch):
    """``fit``'s default runs minibatch VI at the chosen size where the step is large (its
    state is minibatch VI's, its per-step ELBOs the batches' estimates, noisier than the full
    data's at the same parameters), and ``result.batch_size`` names the size."""
    import optax

    model = _mf(rows=1024)
    monkeypatch.setattr(batch_size, "MAX_FULL_BATCH_FLOPS", 1.0)
    monkeypatch.setattr(batch_size, "BATCH_FLOPS", 1.0)
    result = grepvi.fit(model, num_steps=40, optimizer=optax.adam(0.0), progress=False, chunk_size=20)
    assert result.batch_size == batch_size.MIN_BATCH_ROWS
    full = grepvi.fit(
        model, num_steps=40, optimizer=optax.adam(0.0), progress=False, chunk_size=20, batch_size=None
    )
    assert full.batch_size is None
    assert hasattr(result.state, "global_opt_state") and not hasattr(full.state, "global_opt_state")
    # a zero step keeps the initial parameters: the spread is the estimates' own noise, and
    # batches of a quarter of the rows scaled by 4 add the rows' sampling to it
    assert np.std(np.asarray(result.trace.elbo)) > 1.2 * np.std(np.asarray(full.trace.elbo))


def test_resolve_batch_size_errors_and_cases():
    model = _mf(rows=300)
    estimator = get_estimator("grep")
    families = _families(model, estimator)
    assert batch_size.resolve_batch_size(None, model, families, estimator) is None
    assert batch_size.resolve_batch_size(7, model, families, estimator) == 7
    assert batch_size.resolve_batch_size("AUTO", model, families, estimator) is None
    assert batch_size.resolve_batch_size("auto", None, families, estimator) is None  # a plain function
    assert batch_size.resolve_batch_size("auto", model, families, estimator, parallel=True) is None
    with pytest.raises(ConfigError, match="batch_size: expected a positive integer, 'auto' or None"):
        batch_size.resolve_batch_size("half", model, families, estimator)
    with pytest.raises(ConfigError, match="batch_size"):
        batch_size.resolve_batch_size(0, model, families, estimator)


TINY = ["--model", "sparse-gamma-def", "--dataset", "synthetic", "--synthetic-size", "1100,10,16",
        "--layer-sizes", "3,2", "--eval-samples", "5", "--refit-steps", "0", "--quiet",
        "--estimator", "advi", "--num-steps", "40", "--step-size", "0.1"]  # fmt: skip


@pytest.mark.slow  # 48 s on CI; fit's chosen batch stays in the fast tier
def test_cli_default_is_auto_and_reports_the_batch(tmp_path, monkeypatch, capsys):
    """``grepvi fit`` without ``--batch-size`` chooses: every row here (``metrics.json``'s
    ``batch_size`` null); with the limits lowered, the chosen batch (said on the terminal and
    in ``metrics.json``); ``--batch-size all`` every row; a bad value is refused by name."""
    assert cli.main(["fit", *TINY, "--out", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["batch_size"] is None
    monkeypatch.setattr(batch_size, "MAX_FULL_BATCH_FLOPS", 1.0)
    monkeypatch.setattr(batch_size, "BATCH_FLOPS", 1.0)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert cli.main(["fit", *[t for t in TINY if t != "--quiet"], "--out", str(tmp_path / "b")]) == 0
    chosen = json.loads((tmp_path / "b" / "metrics.json").read_text())["batch_size"]
    assert chosen == batch_size.MIN_BATCH_ROWS
    assert f"minibatch VI: {batch_size.MIN_BATCH_ROWS} of 1100 rows a step" in capsys.readouterr().err
    assert cli.main(["fit", *TINY, "--batch-size", "all", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "metrics.json").read_text())["batch_size"] is None
    assert cli.main(["fit", *TINY, "--batch-size", "half", "--out", str(tmp_path / "d")]) == 2
    assert "expected an integer, 'auto' or 'all', found 'half'" in capsys.readouterr().err

"""Several runs of the paper's experiments: the eta search, comparisons, the samples sweep, the demo.

* :func:`eta_search`: one run per ``eta`` of the grid, the best final ELBO kept (Table 1).
* :func:`compare`: several estimators (optionally each with the eta search) and the report.
* :func:`samples_sweep`: G-REP with 1, 2, 5, 10, 20 samples (supplement, Fig. 3).
* :func:`demo`: a small comparison on data simulated from the sparse gamma DEF, no download.

Each run is :func:`grepvi.experiments.run.fit_run` in its own folder.
"""

import dataclasses
import math
from pathlib import Path

from grepvi import validation
from grepvi.errors import ConfigError
from grepvi.experiments.config import SYNTHETIC, RunConfig
from grepvi.experiments.paper import ETA_GRID
from grepvi.experiments.run import fit_run, say
from grepvi.experiments.run_files import RunDirectory, write_json

__all__ = ["eta_search", "compare", "samples_sweep", "demo", "demo_config", "DEMO_ESTIMATORS"]


# --- several runs ------------------------------------------------------------------------------


def _eta_dir(out, eta) -> Path:
    return Path(out) / f"eta_{eta:g}"


def _check_all(plans, resume, overwrite) -> None:
    """Validates every (config, folder) of a multi-run command before any run starts."""
    for config, out in plans:
        checked = config.validate()
        RunDirectory(out).check(checked.identity(), resume=resume, overwrite=overwrite)


def eta_search(
    config: RunConfig, out, etas=ETA_GRID, *, resume=False, overwrite=False, quiet=False, checked=False
) -> tuple[Path, dict]:
    """Runs ``config`` once per ``eta`` (into ``out/eta_<eta>``) and picks the best final ELBO
    (mean of the last 10% of the trace), as the paper's Table 1 does.

    Returns the chosen run's folder and ``{eta: final ELBO}``; writes ``out/eta_search.json``.
    """
    etas = tuple(validation.positive_float(eta, "etas") for eta in etas)
    plans = [(dataclasses.replace(config, step_size=eta), _eta_dir(out, eta)) for eta in etas]
    if not checked:
        _check_all(plans, resume, overwrite)
    scores = {}
    for run_config, run_out in plans:
        say(f"eta search: {config.estimator}, eta = {run_config.step_size:g}", quiet)
        metrics = fit_run(run_config, run_out, resume=resume, overwrite=overwrite, quiet=quiet)
        final = metrics.get("final_elbo")  # null in a finished run's metrics.json when not finite
        scores[run_config.step_size] = -math.inf if final is None else final
    best = max(scores, key=lambda eta: scores[eta] if math.isfinite(scores[eta]) else -math.inf)
    write_json(
        Path(out) / "eta_search.json",
        {
            "estimator": config.estimator,
            "criterion": "mean ELBO over the last 10% of iterations",
            "final_elbo": {f"{eta:g}": value for eta, value in scores.items()},
            "best_eta": best,
            "best_run": str(_eta_dir(out, best)),
        },
    )
    return _eta_dir(out, best), scores


def compare(
    config: RunConfig,
    estimators,
    out,
    *,
    search_eta: bool = False,
    etas=ETA_GRID,
    resume=False,
    overwrite=False,
    quiet=False,
) -> dict:
    """Runs each estimator on the same model and data (``out/<estimator>``; with the eta search
    ``out/<estimator>/eta_<eta>``), then writes the paper's tables and figures into ``out``.

    Returns the report's summary (see :func:`grepvi.experiments.report.build_report`).
    """
    from grepvi.experiments import report

    estimators = [name.strip() for name in estimators if name.strip()]
    if not estimators:
        raise ConfigError("estimators: expected a comma-separated list, e.g. grep,advi,bbvi")
    if len(set(estimators)) != len(estimators):
        raise ConfigError(f"estimators: repeated names in {','.join(estimators)}")
    plans = []
    for name in estimators:
        run_config = dataclasses.replace(config, estimator=name)
        if search_eta:
            plans += [
                (dataclasses.replace(run_config, step_size=eta), _eta_dir(Path(out) / name, eta))
                for eta in etas
            ]
        else:
            plans.append((run_config, Path(out) / name))
    _check_all(plans, resume, overwrite)
    chosen = []
    for name in estimators:
        run_config = dataclasses.replace(config, estimator=name)
        if search_eta:
            best, _ = eta_search(
                run_config,
                Path(out) / name,
                etas,
                resume=resume,
                overwrite=overwrite,
                quiet=quiet,
                checked=True,
            )
            chosen.append(best)
        else:
            fit_run(run_config, Path(out) / name, resume=resume, overwrite=overwrite, quiet=quiet)
            chosen.append(Path(out) / name)
    return report.build_report(chosen, out)


def samples_sweep(
    config: RunConfig, sample_counts, out, *, resume=False, overwrite=False, quiet=False
) -> dict:
    """G-REP with several numbers of samples per gradient, recording the ELBO and the average
    gradient variance (supplement E.1, Fig. 3: Olivetti, 1/2/5/10/20 samples, 200 iterations).

    Runs go to ``out/samples_<S>``; the figure and a table to ``out``.
    """
    from grepvi.experiments import report

    counts = [validation.positive_int(count, "sample_counts") for count in sample_counts]
    plans = [
        (
            dataclasses.replace(config, num_samples=count, compute_variance=count > 1),
            Path(out) / f"samples_{count}",
        )
        for count in counts
    ]
    _check_all(plans, resume, overwrite)
    for run_config, run_out in plans:
        say(f"samples sweep: {run_config.estimator} with {run_config.num_samples} samples", quiet)
        fit_run(run_config, run_out, resume=resume, overwrite=overwrite, quiet=quiet)
    return report.build_report([run_out for _, run_out in plans], out)


DEMO_ESTIMATORS = ("grep", "advi")  # BBVI: add it with estimators=(..., "bbvi"); compiles slowly


def demo_config(seed: int = 0, time_budget: float = 60.0) -> RunConfig:
    """The demo: a 2-layer sparse gamma DEF (8, 4) on 100 + 25 rows of 8x8 counts simulated
    from the model itself; each estimator runs the default procedure for ``time_budget`` seconds
    of wall time (or until it converges), the paper's comparison at equal time."""
    return RunConfig(
        model="sparse-gamma-def",
        dataset=SYNTHETIC,
        estimator="grep",
        time_budget=time_budget,
        seed=seed,
        layer_sizes=(8, 4),
        synthetic_size=(100, 25, 64),
        eval_samples=100,
        refit_steps=100,
        checkpoint_seconds=0.0,
    )


def demo(out, *, estimators=DEMO_ESTIMATORS, seed=0, time_budget=60.0, overwrite=False, quiet=False) -> dict:
    """G-REP against ADVI (BBVI too if listed in ``estimators``) on simulated data; returns the
    report summary."""
    return compare(demo_config(seed, time_budget), estimators, out, overwrite=overwrite, quiet=quiet)

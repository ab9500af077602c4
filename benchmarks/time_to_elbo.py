"""The default procedure against the paper's fixed eta and Stan's eta adaptation, on the paper's
models, same process, same clock: wall time until the ELBO (window medians of the estimator's
own estimates, 100 iterations) first reaches given levels, and the level after the budget.

Contenders (G-REP, each with ``--budget`` seconds of wall time, compilation included):

* ``default``: ``grepvi fit`` with no step size (the procedure of ``grepvi.inference.controller``);
* ``paper``: Eq. 9 with the paper's eta for the data set (Table 1: 5 on Olivetti and MNIST);
* ``stan``: Stan's ADVI adaptation, Eq. 9 at eta in {100, 10, 1, 0.1, 0.01} for 50 iterations
  each, the best final ELBO kept, then Eq. 9 at that eta for the rest of the budget.

Run: ``python -m benchmarks.time_to_elbo --dataset olivetti --budget 300``
(``--dataset mnist`` runs the beta-gamma MF). Needs the data sets (``GREPVI_DATA_DIR``).
"""

import argparse
import math
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from grepvi.experiments import run as experiments
from grepvi.experiments.run_files import read_trace

MODELS = {
    "olivetti": "sparse-gamma-def",
    "mnist": "beta-gamma-mf",
    "omniglot": "beta-gamma-mf",
    "nips": "sparse-gamma-def",
}
STAN_GRID = (100.0, 10.0, 1.0, 0.1, 0.01)


def _config(dataset, **options):
    return experiments.RunConfig(
        model=MODELS[dataset], dataset=dataset, estimator="grep", refit_steps=0, eval_samples=2, **options
    )


def _run(config, out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return experiments.fit_run(config, out, overwrite=True, quiet=True)


def _window_medians(trace, offset=0.0):
    elbo, wall = np.asarray(trace["elbo"], np.float64), np.asarray(trace["wall_time"], np.float64) + offset
    n = elbo.size // 100
    medians = np.array([np.nanmedian(elbo[i * 100 : (i + 1) * 100]) for i in range(n)])
    times = np.array([wall[(i + 1) * 100 - 1] for i in range(n)])
    return times, medians


def run_default(dataset, budget, out):
    start = time.perf_counter()
    metrics = _run(_config(dataset, time_budget=budget), out)
    return _window_medians(read_trace(Path(out) / "trace.csv")), time.perf_counter() - start, metrics


def run_paper(dataset, budget, out):
    eta = experiments.PAPER_ETA[(dataset, "grep")]
    start = time.perf_counter()
    metrics = _run(_config(dataset, time_budget=budget, step_size=eta), out)
    return _window_medians(read_trace(Path(out) / "trace.csv")), time.perf_counter() - start, metrics


def run_stan(dataset, budget, out):
    start = time.perf_counter()
    scores = {}
    for eta in STAN_GRID:
        metrics = _run(_config(dataset, num_steps=50, step_size=eta), Path(out) / f"adapt_{eta:g}")
        trace = read_trace(Path(out) / f"adapt_{eta:g}" / "trace.csv")
        last = np.asarray(trace["elbo"][-10:], np.float64)
        scores[eta] = float(np.mean(last)) if np.all(np.isfinite(last)) else -math.inf
    best = max(scores, key=scores.get)
    adaptation = time.perf_counter() - start
    metrics = _run(
        _config(dataset, time_budget=max(budget - adaptation, 1.0), step_size=best), Path(out) / "run"
    )
    times, medians = _window_medians(read_trace(Path(out) / "run" / "trace.csv"), offset=adaptation)
    metrics["stan_eta"] = best
    return (times, medians), time.perf_counter() - start, metrics


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="olivetti", choices=sorted(MODELS))
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--levels", default="")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, runner in (("default", run_default), ("paper", run_paper), ("stan", run_stan)):
            (times, medians), seconds, metrics = runner(args.dataset, args.budget, Path(folder) / name)
            results[name] = (times, medians, seconds, metrics)
            print(
                f"{name:8s} wall {seconds:6.1f} s, {metrics['iterations']} iterations, "
                "final window median ELBO "
                f"{medians[-1] if medians.size else math.nan:.5g}, best {np.nanmax(medians):.5g}"
                + (f", eta {metrics.get('stan_eta')}" if "stan_eta" in metrics else "")
                + (
                    f", first window {medians[0]:.4g}, lowest {np.nanmin(medians):.4g}"
                    if medians.size
                    else ""
                ),
                flush=True,
            )
    if args.levels:
        levels = [float(v) for v in args.levels.split(",")]
    else:
        best = max(np.nanmax(r[1]) for r in results.values())
        worst_final = min(r[1][-1] for r in results.values())
        levels = list(np.linspace(worst_final, best, 4))
    print("\nseconds until the window median ELBO first reaches each level (-: never):")
    print(f"{'level':>14s} " + " ".join(f"{name:>9s}" for name in results))
    for level in levels:
        cells = []
        for times, medians, _, _ in results.values():
            hit = np.flatnonzero(medians >= level)
            cells.append(f"{times[hit[0]]:9.1f}" if hit.size else f"{'-':>9s}")
        print(f"{level:14.5g} " + " ".join(cells))


if __name__ == "__main__":
    main()

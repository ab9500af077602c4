"""Accuracy and time of ``grepvi.fit`` with its defaults, against the alternatives a user has.

For every estimator (grep, implicit, rsvi, bbvi; advi where its family holds the optimum) and
every model of ``tests/test_default_accuracy.py`` (conjugate: exact posterior; non-conjugate:
scipy's optimum of the closed-form ELBO), over seeds, it prints the worst relative error of
the posterior mean and variance, whether the run says it converged, iterations and wall time.

``--compare`` adds, on the same cases (G-REP only), in the same process:

* **paper**: Eq. 9 with a fixed eta in {0.1, 1, 5} for 4,000 steps (the last iterate), the
  paper's own schedule;
* **stan**: Stan's eta adaptation (Eq. 9 at eta in {100, 10, 1, 0.1, 0.01}, 50 iterations
  each, keep the best ELBO), then Eq. 9 at that eta for 4,000 steps (the last iterate).

Run: ``python -m benchmarks.default_accuracy [--seeds 0,1,2] [--compare] [--csv FILE]``.
"""

import argparse
import csv
import math
import sys
import time
import warnings

import jax
import numpy as np

import grepvi
from grepvi.errors import NotConvergedWarning

sys.path.insert(0, "tests")
from test_default_accuracy import MODELS  # noqa: E402

ESTIMATORS = ("grep", "implicit", "rsvi", "bbvi")
STAN_GRID = (100.0, 10.0, 1.0, 0.1, 0.01)


def _errors(result, families, mean, variance):
    worst_mean, worst_variance = 0.0, 0.0
    for name in families:
        m = np.asarray(result.posterior[name].mean(), np.float64) / mean[name] - 1.0
        v = np.asarray(result.posterior[name].variance(), np.float64) / variance[name] - 1.0
        worst_mean = max(worst_mean, float(np.max(np.abs(m))))
        worst_variance = max(worst_variance, float(np.max(np.abs(v))))
    return worst_mean, worst_variance


def run_default(model_name, estimator, seed):
    logdensity_fn, families, mean, variance = MODELS[model_name]()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        result = grepvi.fit(logdensity_fn, families, estimator, seed=seed, progress=False)
    elapsed = time.perf_counter() - start
    mean_error, variance_error = _errors(result, result.families, mean, variance)
    c = result.convergence
    return {
        "method": "default",
        "estimator": estimator,
        "model": model_name,
        "seed": seed,
        "mean_error": mean_error,
        "variance_error": variance_error,
        "converged": c.converged,
        "iterations": c.num_iterations,
        "direction": c.direction,
        "seconds": elapsed,
    }


def run_fixed(model_name, eta, seed, num_steps=4000, label=None):
    logdensity_fn, families, mean, variance = MODELS[model_name]()
    start = time.perf_counter()
    result = grepvi.fit(
        logdensity_fn, families, "grep", step_size=eta, num_steps=num_steps, seed=seed, progress=False
    )
    elapsed = time.perf_counter() - start
    mean_error, variance_error = _errors(result, result.families, mean, variance)
    return {
        "method": label or f"paper eta={eta:g}",
        "estimator": "grep",
        "model": model_name,
        "seed": seed,
        "mean_error": mean_error,
        "variance_error": variance_error,
        "converged": False,
        "iterations": num_steps,
        "direction": f"eq9 eta={eta:g}",
        "seconds": elapsed,
    }


def run_stan(model_name, seed, num_steps=4000):
    logdensity_fn, families, *_ = MODELS[model_name]()
    start = time.perf_counter()
    scores = {}
    for eta in STAN_GRID:
        trial = grepvi.fit(
            logdensity_fn, families, "grep", step_size=eta, num_steps=50, seed=seed, progress=False
        )
        elbo = trial.trace.elbo[-10:]
        scores[eta] = float(np.mean(elbo)) if np.all(np.isfinite(elbo)) else -math.inf
    best = max(scores, key=scores.get)
    row = run_fixed(model_name, best, seed, num_steps, label="stan")
    row["seconds"] += time.perf_counter() - start
    return row


HEADER = (
    f"{'method':16s} {'estimator':9s} {'model':24s} seed  mean err  var err  conv  iterations  "
    "steps    seconds"
)


def _within(row, tolerance=0.02):
    return row["mean_error"] < tolerance and row["variance_error"] < tolerance


def _print(rows):
    for r in rows:
        print(
            f"{r['method']:16s} {r['estimator']:9s} {r['model']:24s} {r['seed']:4d}  {r['mean_error']:8.4f} "
            f"{r['variance_error']:8.4f}  {'yes' if r['converged'] else 'no':4s}  {r['iterations']:10d}  "
            f"{r['direction']:8s} {r['seconds']:7.1f}",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--csv")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    print(f"jax {jax.__version__}, backend {jax.default_backend()}")
    print(HEADER)
    for estimator in args.estimators.split(","):
        for model in args.models.split(","):
            for seed in seeds:
                rows.append(run_default(model, estimator, seed))
                _print(rows[-1:])
    if "lognormal-normal" in args.models:
        for seed in seeds:
            rows.append(run_default("lognormal-normal", "advi", seed))
            _print(rows[-1:])
    if args.compare:
        for model in args.models.split(","):
            for seed in seeds:
                for eta in (0.1, 1.0, 5.0):
                    rows.append(run_fixed(model, eta, seed))
                    _print(rows[-1:])
                rows.append(run_stan(model, seed))
                _print(rows[-1:])
    print("\nworst errors by method and estimator (all models and seeds):")
    keys = sorted({(r["method"], r["estimator"]) for r in rows})
    for method, estimator in keys:
        group = [r for r in rows if r["method"] == method and r["estimator"] == estimator]
        print(
            f"  {method:16s} {estimator:9s} mean {max(r['mean_error'] for r in group):.4f}  "
            f"variance {max(r['variance_error'] for r in group):.4f}  "
            f"within 2%: {sum(_within(r) for r in group)}/{len(group)}  "
            f"converged {sum(r['converged'] for r in group)}/{len(group)}  "
            f"max time {max(r['seconds'] for r in group):.1f} s"
        )
    if args.csv:
        with open(args.csv, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()

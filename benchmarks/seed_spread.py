"""How a default fit's time and answer vary with its seed: each seed in a fresh process.

``from_numpyro(model, *data).fit(seed=s)`` for each seed (compilation cache off, so every run
compiles as a user's first does), printing the wall time, iterations, stages and draws a step
at the end, then the spread of the posterior means across the seeds in posterior standard
deviations (what the convergence rule's tolerance bounds) and the slowest run over the
median::

    python benchmarks/seed_spread.py --models gp_30 rat_tumors --seeds 0 1 2 3
    python benchmarks/seed_spread.py --models gp_30 --seeds 0 1 2 3 --noise-quantile none

``--noise-quantile none`` runs the controller with the stage changes' noise subtracted at its
expectation (before the forty-first session) instead of its 90th percentile
(``grepvi.inference.controller.NOISE_QUANTILE``).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _worker(model_name: str, seed: int, noise_quantile: str) -> dict:
    import warnings

    sys.path.insert(0, str(HERE))
    import numpyro  # noqa: F401 - imported before the clock, as time_to_answer.py does
    import numpyro.distributions  # noqa: F401
    from textbook_models import ALL_MODELS

    from grepvi.inference import controller
    from grepvi.interop.numpyro_model import from_numpyro

    if noise_quantile != "default":
        controller.NOISE_QUANTILE = None if noise_quantile == "none" else float(noise_quantile)
    entry = ALL_MODELS[model_name]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = from_numpyro(entry.model, *entry.args).fit(progress=False, seed=seed)
    seconds = time.perf_counter() - start
    means, sds = [], []
    for name in sorted(result.posterior):
        q = result.posterior[name]
        means.append(np.ravel(np.asarray(q.mean(), np.float64)))
        sds.append(np.sqrt(np.ravel(np.asarray(q.variance(), np.float64))))
    record = result.convergence
    return {
        "seed": seed,
        "time": seconds,
        "iterations": int(record.num_iterations),
        "stages": int(record.num_stages),
        "draws": int(record.draws),
        "converged": bool(record.converged),
        "mean": np.concatenate(means).tolist(),
        "sd": np.concatenate(sds).tolist(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["gp_30"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument(
        "--noise-quantile", default="default", help="'none', a level (0.9, 0.95) or 'default'"
    )
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker[0], int(args.worker[1]), args.noise_quantile)))
        return
    env = {**os.environ, "GREPVI_COMPILATION_CACHE": "0"}
    for model in args.models:
        rows = []
        print(f"\n{model} (noise quantile: {args.noise_quantile})")
        for seed in args.seeds:
            command = [sys.executable, __file__, "--worker", model, str(seed)]
            command += ["--noise-quantile", args.noise_quantile]
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode:
                print(f"  seed {seed}: failed: {done.stderr[-400:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"  seed {seed}: {row['time']:6.2f} s, {row['iterations']:6d} it, {row['stages']} stages, "
                f"{row['draws']} draws a step{'' if row['converged'] else ', NOT converged'}",
                flush=True,
            )
        if len(rows) < 2:
            continue
        means = np.array([row["mean"] for row in rows])
        sd = np.mean([row["sd"] for row in rows], axis=0)
        spread = means.std(axis=0, ddof=1) / sd
        times = [row["time"] for row in rows]
        print(
            f"  spread of the means across seeds: largest {spread.max():.4f} sd, "
            f"median {np.median(spread):.4f}; slowest / median time {max(times) / np.median(times):.2f}"
        )


if __name__ == "__main__":
    main()

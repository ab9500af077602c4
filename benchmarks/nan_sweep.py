"""NaN sweep: do non-finite values ever reach the variational parameters?

For every estimator (grep, bbvi, advi, implicit, rsvi) and each of the paper's model/data
pairs (sparse gamma DEF on Olivetti and NIPS, beta-gamma MF on MNIST and Omniglot), float32,
``--seeds`` independent runs of ``--iterations`` steps of Algorithm 1 (``grepvi.inference.state.step``,
the paper's step-size sequence with its eta for that data set and estimator). All seeds of one
cell run in one compiled ``vmap(scan(step))``, so each cell compiles once.

Per cell it counts

* ``nonfinite_params``: non-finite parameter values after any step (summed over steps and
  seeds; must be 0: the step guard in ``inference.step`` keeps the old parameters);
* ``skipped``: steps whose gradient had a non-finite component (skipped by the guard), and
  per latent how many of those steps had it in that latent (``StepInfo.nonfinite_latents``);
* ``nonfinite_elbo``: steps whose ELBO estimate was not finite.

The issue asks for 20 seeds x 500 iterations on the full data; ``--rows`` takes the first rows
of the training split and ``--columns`` evenly spaced columns so that a CPU can run it.
Output: a table on stdout and a CSV (``--csv``). Data from ``--data-dir``,
``$GREPVI_DATA_DIR`` or ``../shared/data``.

    python benchmarks/nan_sweep.py --seeds 20 --iterations 500 --rows 0   # the issue's size
    python benchmarks/nan_sweep.py --seeds 2 --iterations 100 --rows 20   # what fits a laptop
"""

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.data import load_dataset
from grepvi.estimators import get_estimator
from grepvi.experiments import config
from grepvi.experiments.paper import PAPER_ETA
from grepvi.inference.state import init, step
from grepvi.models import beta_gamma_mf, sparse_gamma_def
from grepvi.optim.advi import advi_stepsize

PAIRS = (
    ("sparse-gamma-def", "olivetti"),
    ("sparse-gamma-def", "nips"),
    ("beta-gamma-mf", "mnist"),
    ("beta-gamma-mf", "omniglot"),
)
ESTIMATORS = ("grep", "bbvi", "advi", "implicit", "rsvi")
REPO = Path(__file__).resolve().parent.parent


def data_dir(explicit=None):
    if explicit:
        return explicit
    if os.environ.get("GREPVI_DATA_DIR"):
        return os.environ["GREPVI_DATA_DIR"]
    return str(REPO.parent / "shared" / "data")


def eta(dataset: str, estimator: str) -> float:
    default = config.DEFAULT_ETA_BY_ESTIMATOR.get(estimator, config.DEFAULT_ETA)
    return PAPER_ETA.get((dataset, estimator), default)


def build(model_name, data, layer_sizes, num_factors):
    if model_name == "sparse-gamma-def":
        return sparse_gamma_def(data, layer_sizes=layer_sizes)
    return beta_gamma_mf(data, num_factors=num_factors)


def sweep_cell(model, estimator_name, step_size, seeds, iterations, seed_offset=0):
    """Counts of one (model, estimator) cell over ``seeds`` vmapped runs of ``iterations`` steps."""
    options = {"num_elbo_samples": 0} if estimator_name == "advi" else {}
    estimator = get_estimator(estimator_name, **options)
    families = estimator.adapt_families(model.latents())
    target = model.target(families)
    optimizer = advi_stepsize(step_size)
    names = sorted(families)

    def one_run(key, data):
        state = init(key, target, optimizer)

        def body(carry, _):
            state, counts = carry
            state, info = step(state, target, estimator, optimizer, data)
            bad_params = sum(jnp.sum(~jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(state.params))
            counts = {
                "nonfinite_params": counts["nonfinite_params"] + bad_params.astype(jnp.int32),
                "nonfinite_elbo": counts["nonfinite_elbo"] + (~jnp.isfinite(info.elbo)).astype(jnp.int32),
                "latents": counts["latents"] + info.nonfinite_latents.astype(jnp.int32),
            }
            return (state, counts), None

        zero = jnp.zeros([], jnp.int32)
        counts = {
            "nonfinite_params": zero,
            "nonfinite_elbo": zero,
            "latents": jnp.zeros(len(names), jnp.int32),
        }
        (state, counts), _ = jax.lax.scan(body, (state, counts), None, length=iterations)
        counts["skipped"] = state.num_skipped
        return counts

    keys = jax.vmap(jax.random.key)(jnp.arange(seed_offset, seed_offset + seeds))
    start = time.perf_counter()
    counts = jax.jit(jax.vmap(one_run, in_axes=(0, None)))(keys, model.data)
    counts = jax.tree_util.tree_map(lambda x: np.asarray(x).sum(0), counts)
    seconds = time.perf_counter() - start
    return {
        "nonfinite_params": int(counts["nonfinite_params"]),
        "skipped": int(counts["skipped"]),
        "nonfinite_elbo": int(counts["nonfinite_elbo"]),
        "skipped_by_latent": {n: int(c) for n, c in zip(names, counts["latents"], strict=True) if c},
        "seconds": seconds,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--rows", type=int, default=0, help="first rows of the training split (0: all)")
    parser.add_argument(
        "--columns", type=int, default=0, help="that many evenly spaced columns (pixels, words; 0: all)"
    )
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--datasets", default=",".join(d for _, d in PAIRS))
    parser.add_argument("--layer-sizes", default="100,40,15")
    parser.add_argument("--num-factors", type=int, default=100)
    parser.add_argument("--data-dir")
    parser.add_argument("--csv", default="nan_sweep.csv")
    args = parser.parse_args(argv)
    layer_sizes = tuple(int(s) for s in args.layer_sizes.split(","))
    wanted = set(args.datasets.split(","))
    rows_out = []
    header = (
        f"{'model':17} {'dataset':9} {'estimator':9} {'eta':>4} {'N x D':>11} {'nonfin. params':>14} "
        f"{'skipped':>8} {'nonfin. ELBO':>12} {'s':>6}  skipped steps by latent"
    )
    print(header)
    print("-" * len(header))
    for model_name, dataset_name in PAIRS:
        if dataset_name not in wanted:
            continue
        dataset = load_dataset(dataset_name, data_dir(args.data_dir))
        train = np.asarray(dataset.train, np.float32)
        if args.rows:
            train = train[: args.rows]
        if args.columns and args.columns < train.shape[1]:
            train = train[:, np.linspace(0, train.shape[1] - 1, args.columns).round().astype(int)]
        model = build(model_name, jnp.asarray(train), layer_sizes, args.num_factors)
        for estimator_name in args.estimators.split(","):
            step_size = eta(dataset_name, estimator_name)
            cell = sweep_cell(model, estimator_name, step_size, args.seeds, args.iterations)
            row = {
                "model": model_name,
                "dataset": dataset_name,
                "estimator": estimator_name,
                "eta": step_size,
                "rows": train.shape[0],
                "columns": train.shape[1],
                "seeds": args.seeds,
                "iterations": args.iterations,
                "nonfinite_params": cell["nonfinite_params"],
                "skipped": cell["skipped"],
                "nonfinite_elbo": cell["nonfinite_elbo"],
                "skipped_by_latent": ";".join(f"{k}:{v}" for k, v in cell["skipped_by_latent"].items()),
                "seconds": round(cell["seconds"], 1),
            }
            rows_out.append(row)
            print(
                f"{model_name:17} {dataset_name:9} {estimator_name:9} {step_size:>4} "
                f"{f'{train.shape[0]}x{train.shape[1]}':>11} {row['nonfinite_params']:>14} "
                f"{row['skipped']:>8} {row['nonfinite_elbo']:>12} {row['seconds']:>6}  "
                f"{row['skipped_by_latent'] or '-'}",
                flush=True,
            )
            with open(args.csv, "w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=list(rows_out[0]))
                writer.writeheader()
                writer.writerows(rows_out)
    print(f"{args.seeds} seeds x {args.iterations} iterations per cell, float32; CSV: {args.csv}")
    return 1 if any(r["nonfinite_params"] for r in rows_out) else 0


if __name__ == "__main__":
    sys.exit(main())

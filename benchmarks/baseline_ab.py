"""G-REP's baselines at equal steps: the running baseline (the default) against the value at the
means, on the paper's models, in one process.

Each variant is the default procedure's compiled window (:func:`grepvi.inference.fitting.setup`)
with one rule selected (``--rule``, default Adam 0.1, the rule the trial keeps on both models),
from the same start and seed; the windows of the variants alternate, so the machine's drift
reaches them alike. Printed every tenth of the run: each variant's window-median ELBO; at the
end the milliseconds a step::

    python benchmarks/baseline_ab.py --model def --steps 1500
    python benchmarks/baseline_ab.py --model mf --steps 800
    python benchmarks/baseline_ab.py --model mf --steps 2000 --batch-size 500   # minibatch VI

(``GREPVI_DATA_DIR`` names the folder with Olivetti and MNIST.)
"""

import argparse
import os
import time

import numpy as np

VARIANTS = {"means": {"baseline": "means"}, "running": {}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("def", "mf"), default="def")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rule", default="adam-0.1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, help="minibatch VI over the rows (default: the full data)")
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from grepvi.data import load_dataset
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting
    from grepvi.models import beta_gamma_mf, sparse_gamma_def

    x = load_dataset("olivetti" if args.model == "def" else "mnist", args.data_dir).train.astype(np.float32)
    model = sparse_gamma_def(x) if args.model == "def" else beta_gamma_mf(x, num_factors=100)
    data = jax.tree_util.tree_map(jnp.asarray, model.data)
    runs = {}
    for label, options in VARIANTS.items():
        estimator = get_estimator("grep", **options)
        target = model.target()
        target = target._replace(families=estimator.adapt_families(target.families))
        prepared = fitting.setup(
            target,
            estimator,
            data=data,
            time_budget=1e9,
            model=model,
            check=False,
            seed=args.seed,
            batch_size=args.batch_size,
        )
        labels = [c.label for c in prepared.plan.candidates]
        candidate = prepared.plan.candidates[labels.index(args.rule)]
        state = prepared.plan.select(prepared.initial.loop, labels.index(args.rule), candidate.step_size)
        prepared.window.compile(state, data)
        runs[label] = {"window": prepared.window, "state": state, "seconds": 0.0, "median": np.nan}
    length = next(iter(runs.values()))["window"].length
    rounds = max(1, args.steps // length)
    batches = f", batches of {args.batch_size} rows" if args.batch_size else ""
    print(
        f"{args.model}, {args.rule}{batches}, window-median ELBO after each tenth of {rounds * length} steps"
    )
    for r in range(rounds):
        for run in runs.values():
            start = time.perf_counter()
            run["state"], _, out = run["window"](run["state"], data, length)
            elbo = np.asarray(out["elbo"])
            run["seconds"] += time.perf_counter() - start
            run["median"] = float(np.median(elbo))
        if (r + 1) % max(1, rounds // 10) == 0 or r + 1 == rounds:
            cells = "  ".join(f"{label} {run['median']:.5g}" for label, run in runs.items())
            print(f"{(r + 1) * length:6d} steps  {cells}", flush=True)
    costs = {label: 1e3 * run["seconds"] / (rounds * length) for label, run in runs.items()}
    print("ms a step: " + ", ".join(f"{label} {cost:.2f}" for label, cost in costs.items()))
    print(f"running / means, ms a step: {costs['running'] / costs['means']:.3f}")


if __name__ == "__main__":
    main()

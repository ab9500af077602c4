"""Where the default procedure's time goes on the paper's models, and each rule's ELBO curve.

For one model (``def``: sparse gamma DEF on Olivetti; ``mf``: beta-gamma MF on MNIST), in one
process::

    python benchmarks/rule_curves.py --model def --seconds 60

prints the wall time of each part before the first step (model construction, ``setup``:
initial state and the target's check, the window's ahead-of-time compilation, the first call)
and then runs every candidate rule of the trial (:func:`grepvi.inference.rules.default_candidates`)
alone, from the same start, as a fixed schedule in windows of 100 steps for ``--seconds``
each (the compilation is shared, as in a fit): per window its end time (seconds of that rule's
run), the iterations and the median one-draw ELBO. The last lines give each rule's time per
step and its median ELBO at 10, 20, 30, ... seconds.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("def", "mf"), default="def")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rules", nargs="*", help="candidate labels to run (default: all)")
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import jax

    from grepvi.data import load_dataset
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting
    from grepvi.models import beta_gamma_mf, sparse_gamma_def

    name = "olivetti" if args.model == "def" else "mnist"
    x = load_dataset(name, args.data_dir).train.astype(np.float32)
    t0 = time.perf_counter()
    model = sparse_gamma_def(x) if args.model == "def" else beta_gamma_mf(x, num_factors=100)
    t1 = time.perf_counter()
    target = model.target()
    estimator = get_estimator("grep")
    target = target._replace(families=estimator.adapt_families(target.families))
    data = jax.tree_util.tree_map(jax.numpy.asarray, model.data)
    prepared = fitting.setup(target, estimator, seed=args.seed, data=data, time_budget=1e9, model=model)
    t2 = time.perf_counter()
    window, plan = prepared.window, prepared.plan
    initial = plan.initial_state
    window.compile(initial, data)
    t3 = time.perf_counter()
    jax.block_until_ready(window(initial, data, 0))
    t4 = time.perf_counter()
    print(
        f"{args.model}: model {t1 - t0:.2f} s, setup {t2 - t1:.2f} s, compile {t3 - t2:.2f} s, "
        f"first call {t4 - t3:.2f} s",
        flush=True,
    )
    summary = {}
    for index, candidate in enumerate(plan.candidates):
        if args.rules and candidate.label not in args.rules:
            continue
        loop = plan.select(initial, index, candidate.step_size)
        start, iterations, curve = time.perf_counter(), 0, []
        while time.perf_counter() - start < args.seconds:
            loop, _, outputs = window(loop, data, window.length)
            elbo = np.asarray(outputs["elbo"], np.float64)
            iterations += window.length
            finite = elbo[np.isfinite(elbo)]
            median = np.median(finite) if finite.size else np.nan
            curve.append((time.perf_counter() - start, iterations, median))
            print(f"  {candidate.label:10s} {curve[-1][0]:7.1f} s {iterations:6d} it  median {median:.5g}")
        seconds = curve[-1][0]
        marks = []
        for mark in range(10, int(args.seconds) + 1, 10):
            before = [c for c in curve if c[0] <= mark]
            marks.append(f"{before[-1][2]:.4g}" if before else "-")
        summary[candidate.label] = (1e3 * seconds / iterations, iterations, marks)
    print(f"\n{'rule':10s} {'ms/step':>8s} {'steps':>6s}  median ELBO at 10, 20, ... s")
    for label, (ms, iterations, marks) in summary.items():
        print(f"{label:10s} {ms:8.1f} {iterations:6d}  " + " ".join(marks))


if __name__ == "__main__":
    main()

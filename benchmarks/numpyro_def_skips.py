"""Skipped steps of the sparse gamma DEF written in NumPyro, fitted by grepvi's defaults on Olivetti.

``from_numpyro(sparse_gamma_def_model, x).fit(time_budget=B)``; counts the steps skipped for a
non-finite gradient (``NonFiniteStepWarning``). Before the adapter evaluated the latents in log
space (``issues show 23``): 79 of 2,422 steps skipped in 120 s (``W2``, ``z3``). After, on the
shared 2-core CPU: 0 of 600 and 1 of 2,500 steps (``fit(num_steps=...)``), 43 of 4,056 in 120 s.

Skips are rare events of a run, so the run's count alone compares poorly; ``--draws K`` then
draws K G-REP gradients at the fitted answer (fixed seeds) and counts the non-finite ones with
the log density as the adapter's log joint gives it (float32) and as ``NumPyroModel.fit``
differentiates it (``float64_where_float32_overflows``: float64 where float32 overflows).

    GREPVI_DATA_DIR=/work/shared/data PYTHONPATH=. python benchmarks/numpyro_def_skips.py [--time-budget 120]
"""

import argparse
import re
import time
import warnings

import numpy as np


def main():
    from grepvi.data import load_dataset
    from grepvi.interop.numpyro_examples import sparse_gamma_def_model
    from grepvi.interop.numpyro_model import from_numpyro

    parser = argparse.ArgumentParser()
    parser.add_argument("--time-budget", type=float, default=120.0)
    parser.add_argument("--draws", type=int, default=0, help="gradient draws at the answer (0: none)")
    args = parser.parse_args()
    x = np.asarray(load_dataset("olivetti").train, np.float32)
    start = time.perf_counter()
    adapted = from_numpyro(sparse_gamma_def_model, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = adapted.fit(time_budget=args.time_budget, progress=False)
    seconds = time.perf_counter() - start
    skipped = 0
    for warning in caught:
        match = re.search(r"(\d+) of (\d+) step\(s\) skipped", str(warning.message))
        if match:
            skipped = int(match.group(1))
    print(
        f"time budget {args.time_budget:g} s: {result.convergence.num_iterations} iterations, "
        f"{skipped} skipped, "
        f"final ELBO {np.nanmean(result.trace.elbo[-100:]):.4g}, {seconds:.0f} s in all"
    )
    if args.draws:
        count_nonfinite_draws(adapted, result, args.draws)


def count_nonfinite_draws(adapted, result, draws):
    import jax

    from grepvi.estimators.grep import grep
    from grepvi.inference.state import make_target
    from grepvi.inference.widened_gradient import float64_where_float32_overflows
    from grepvi.target import bind_data

    estimator = grep()
    for label, logdensity in (
        ("float32", adapted.joint.logdensity_fn),
        ("widened", float64_where_float32_overflows(adapted.joint.logdensity_fn)),
    ):
        target = make_target(
            logdensity, result.families, adapted.joint.local_logdensity_fn, takes_data=True, log_space=True
        )

        @jax.jit
        def finite(key, params, data, target=target):
            grads, _ = estimator.estimate(key, params, bind_data(target, data))
            return jax.numpy.all(
                jax.numpy.stack([jax.numpy.all(jax.numpy.isfinite(g)) for g in jax.tree.leaves(grads)])
            )

        bad = sum(
            not bool(finite(jax.random.PRNGKey(seed), result.params, adapted.data)) for seed in range(draws)
        )
        print(f"{label}: {bad} of {draws} gradient draws at the answer non-finite")


if __name__ == "__main__":
    main()

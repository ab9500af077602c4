"""Skipped steps of the sparse gamma DEF written in NumPyro, fitted by grepvi's defaults on Olivetti.

``from_numpyro(sparse_gamma_def_model, x).fit(time_budget=B)``; counts the steps skipped for a
non-finite gradient (``NonFiniteStepWarning``). Before the adapter evaluated the latents in log
space (``issues show 23``): 79 of 2,422 steps skipped in 120 s (``W2``, ``z3``). After, on the
shared 2-core CPU: 0 of 600 and 1 of 2,500 steps (``fit(num_steps=...)``; the time budget of
120 s there gave only 52 iterations, the compilations taking most of it).

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


if __name__ == "__main__":
    main()

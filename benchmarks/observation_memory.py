"""Peak temporary host memory of :func:`grepvi.models.factors.observation_matrix`.

Validates a Bernoulli matrix of the full Omniglot size (32,460 x 11,025 float32, 1.33 GiB;
random 0/1 values, no data needed) and prints the peak of ``tracemalloc`` during the call
(numpy reports its allocations to it; the device buffer the model keeps is XLA's and is not
counted). Second session: 0.04 GiB; before row-block validation 4.67 GiB.

    python -m benchmarks.observation_memory [--rows 32460] [--columns 11025]
"""

import argparse
import tracemalloc

import numpy as np

from grepvi.models.factors import observation_matrix


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32460)
    parser.add_argument("--columns", type=int, default=11025)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    data = (rng.random((args.rows, args.columns), dtype=np.float32) < 0.2).astype(np.float32)
    tracemalloc.start()
    observation_matrix(data, "bernoulli")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"input {data.nbytes / 2**30:.2f} GiB; peak temporary host memory {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()

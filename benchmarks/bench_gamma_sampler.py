"""Time gamma draws: ``grepvi.sampling.log_gamma`` against JAX's and NumPy's samplers.

G-REP draws one gamma variate per variational element per iteration (about 460,000 for the
paper's sparse gamma DEF). Two workloads of that size: shapes log-uniform in [0.05, 5] (as
in the paper's fits) and every shape 0.1. Each sampler is timed as the median over
``--repeats`` calls (a fresh key per call, ``block_until_ready``, compilation excluded by a
warm-up call); ratios are speed-ups of the median wall time (``> 1``: faster than the
reference column). ``cpu ms`` is the median process CPU time of a call (summed over XLA's
threads), which other jobs on a shared machine disturb less than wall time.

Usage::

    python -m benchmarks.bench_gamma_sampler --size 460000 --repeats 20 --csv gamma.csv

(from the repository root, so that ``grepvi`` imports).
"""

import argparse
import csv
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.sampling import log_gamma

__all__ = ["main", "parse_args", "time_sampler", "workloads"]


def workloads(size, seed):
    """Shape arrays ``{name: alpha}`` of ``size`` elements: the paper-like mix and all 0.1."""
    rng = np.random.default_rng(seed)
    mix = np.exp(rng.uniform(np.log(0.05), np.log(5.0), size)).astype(np.float32)
    return {
        "log-uniform [0.05, 5]": mix,
        "all 0.1": np.full(size, 0.1, np.float32),
    }


def time_sampler(draw, arguments, repeats):
    """Seconds of ``draw(*arguments(i))`` over ``repeats`` calls: median and minimum wall
    time, and median process CPU time (all threads; robust to other jobs on the machine)."""
    jax.block_until_ready(draw(*arguments(-1)))  # warm-up: compilation
    wall_seconds, cpu_seconds = [], []
    for repeat in range(repeats):
        call_arguments = arguments(repeat)
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        jax.block_until_ready(draw(*call_arguments))
        cpu_seconds.append(time.process_time() - cpu_start)
        wall_seconds.append(time.perf_counter() - wall_start)
    return statistics.median(wall_seconds), min(wall_seconds), statistics.median(cpu_seconds)


def _samplers(seed):
    """``{name: (draw, arguments_for(alpha))}``; ``arguments_for(alpha)(i)`` gives call i's."""
    base_key = jax.random.key(seed)

    def jax_arguments(alpha):
        alpha = jnp.asarray(alpha)
        return lambda repeat: (jax.random.fold_in(base_key, repeat + 1), alpha)

    generator = np.random.default_rng(seed)

    def numpy_arguments(alpha):
        return lambda repeat: (alpha,)

    return {
        "grepvi log_gamma": (jax.jit(log_gamma), jax_arguments),
        "jax.random.loggamma": (jax.jit(jax.random.loggamma), jax_arguments),
        "jax.random.gamma": (jax.jit(jax.random.gamma), jax_arguments),
        "numpy Generator.gamma": (generator.gamma, numpy_arguments),
    }


def main(args):
    """Run every sampler on every workload, print a table and optionally write a CSV."""
    print(
        f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}; size {args.size}, "
        f"median of {args.repeats} calls"
    )
    samplers = _samplers(args.seed)
    rows = []
    for workload, alpha in workloads(args.size, args.seed).items():
        times = {
            name: time_sampler(draw, arguments_for(alpha), args.repeats)
            for name, (draw, arguments_for) in samplers.items()
        }
        for name, (median, minimum, cpu) in times.items():
            rows.append(
                {
                    "workload": workload,
                    "sampler": name,
                    "size": args.size,
                    "repeats": args.repeats,
                    "median_ms": 1e3 * median,
                    "min_ms": 1e3 * minimum,
                    "cpu_ms": 1e3 * cpu,
                    "speedup_vs_jax_gamma": times["jax.random.gamma"][0] / median,
                    "speedup_vs_numpy": times["numpy Generator.gamma"][0] / median,
                }
            )
    _print_table(rows)
    if args.csv:
        with open(args.csv, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    return rows


def _print_table(rows):
    header = (
        f"{'workload':<22} {'sampler':<22} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} "
        f"{'x jax.gamma':>12} {'x numpy':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['workload']:<22} {row['sampler']:<22} {row['median_ms']:>10.2f} "
            f"{row['min_ms']:>8.2f} {row['cpu_ms']:>8.2f} {row['speedup_vs_jax_gamma']:>12.2f} "
            f"{row['speedup_vs_numpy']:>8.2f}"
        )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=460_000, help="gamma draws per call")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per sampler")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="write the table to this CSV path")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

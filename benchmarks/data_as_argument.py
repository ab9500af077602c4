"""What passing the data as an argument buys: compile time, full-batch Omniglot, minibatch epochs.

Sections (``--sections``, any of ``compile,full,minibatch``):

* ``compile``: lowering + compiling one G-REP step (:func:`grepvi.inference.state.step`, jitted
  with the data as an argument) of the beta-gamma MF (K=100, D=11,025) at N = 1,000 and at
  the full Omniglot N = 32,460; and, for comparison, the same step at N = 1,000 with the
  data closed over (a constant of the program, the design before: at N = 32,460 it never
  started, >200 s hashing the 1.43 GB constant for the compilation cache).
* ``full``: median seconds of one full-batch G-REP iteration of that MF on the full set
  (32,460 x 11,025), and the process's peak resident memory.
* ``minibatch``: minibatch G-REP (:mod:`grepvi.inference.minibatch`), batches of ``--batch-size``
  rows: median step time and the time per epoch (N / B steps).

Data: the full Omniglot set from ``--data-dir`` (else ``$GREPVI_DATA_DIR``, else
``../shared/data``; the train and test drawers together), else Bernoulli(0.2) pixels of the
same shape.

Usage::

    python -m benchmarks.data_as_argument --sections compile,full,minibatch
"""

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

from grepvi.estimators.base import get_estimator
from grepvi.inference.state import init, step
from grepvi.models import beta_gamma_mf
from grepvi.optim.advi import advi_stepsize

FULL_OMNIGLOT = (32460, 11025)


def load_omniglot(directory, seed=0):
    if directory is not None:
        try:
            from grepvi.data import load_dataset

            omniglot = load_dataset("omniglot", directory, alphabets="all")
            return np.concatenate([omniglot.train, omniglot.test]).astype(np.float32), "Omniglot"
        except Exception as error:  # noqa: BLE001
            print(f"omniglot not loaded ({error}); using Bernoulli(0.2) pixels", file=sys.stderr)
    rng = np.random.default_rng(seed)
    return (rng.random(FULL_OMNIGLOT) < 0.2).astype(np.float32), "Bernoulli(0.2)"


def compiled_step(model, estimator="grep", closed_over=False):
    """``(compile seconds, call)`` of one jitted step; ``closed_over`` embeds the data."""
    estimator = get_estimator(estimator)
    target = model.target()
    optimizer = advi_stepsize(0.1)
    state = init(jax.random.key(0), target, optimizer)
    data = model.data
    start = time.perf_counter()
    if closed_over:
        program = jax.jit(lambda s: step(s, target, estimator, optimizer, data)).lower(state).compile()
        call = lambda s: program(s)  # noqa: E731
    else:
        program = jax.jit(lambda s, d: step(s, target, estimator, optimizer, d)).lower(state, data).compile()
        call = lambda s: program(s, data)  # noqa: E731
    return time.perf_counter() - start, call, state


def section_compile(data, k, rows):
    for n in (1000, data.shape[0]):
        seconds, _, _ = compiled_step(beta_gamma_mf(data[:n], num_factors=k))
        print(f"compile MF step, data as argument, N={n}: {seconds:.2f} s")
        rows.append(("compile", f"N={n} data as argument", seconds))
    seconds, _, _ = compiled_step(beta_gamma_mf(data[:1000], num_factors=k), closed_over=True)
    print(f"compile MF step, data a constant, N=1000: {seconds:.2f} s")
    rows.append(("compile", "N=1000 data a constant", seconds))


def section_full(data, k, repeats, rows):
    compile_seconds, call, state = compiled_step(beta_gamma_mf(data, num_factors=k))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        state, info = call(state)
        jax.block_until_ready(info.elbo)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"full-batch G-REP MF K={k} on {data.shape[0]}x{data.shape[1]}: compile {compile_seconds:.1f} s, "
        f"median iteration {median:.2f} s over {repeats}, ELBO {float(info.elbo):.4g}, peak RSS {peak:.1f} GB"
    )
    rows.append(("full", "iteration s", median))
    rows.append(("full", "peak RSS GB", peak))


def section_minibatch(data, k, batch_size, steps, rows):
    from grepvi.inference.minibatch import minibatch_fit_steps

    seconds, compile_seconds = minibatch_fit_steps(beta_gamma_mf, data, {"num_factors": k}, batch_size, steps)
    median = statistics.median(seconds)
    epoch = median * data.shape[0] / batch_size
    print(
        f"minibatch G-REP batch {batch_size}: compile+first {compile_seconds:.1f} s, median step "
        f"{median * 1e3:.0f} ms, epoch ({data.shape[0] / batch_size:.1f} steps) {epoch:.1f} s"
    )
    rows.append(("minibatch", f"step s (B={batch_size})", median))
    rows.append(("minibatch", "epoch s", epoch))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="compile,full,minibatch")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--num-factors", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--minibatch-steps", type=int, default=10)
    args = parser.parse_args(argv)
    directory = args.data_dir or os.environ.get("GREPVI_DATA_DIR")
    if directory is None and (Path(__file__).parents[2] / "shared" / "data").is_dir():
        directory = str(Path(__file__).parents[2] / "shared" / "data")
    start = time.perf_counter()
    data, source = load_omniglot(directory)
    print(
        f"data: {source} {data.shape[0]}x{data.shape[1]} ({data.nbytes / 2**30:.2f} GB float32), "
        f"loaded in {time.perf_counter() - start:.1f} s; {jax.devices()[0].platform}"
    )
    rows = []
    sections = set(args.sections.split(","))
    if "compile" in sections:
        section_compile(data, args.num_factors, rows)
    if "minibatch" in sections:
        section_minibatch(data, args.num_factors, args.batch_size, args.minibatch_steps, rows)
    if "full" in sections:
        section_full(data, args.num_factors, args.repeats, rows)
    return rows


if __name__ == "__main__":
    main()

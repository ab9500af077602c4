"""Per-iteration time of the sparse gamma DEF written in NumPyro (grepvi.interop.numpyro_model) against
grepvi's named-axis DEF, same step, same data, interleaved.

Both run :func:`grepvi.inference.state.step` (G-REP with local log joints, Eq. 9 with eta 0.5) in a
jitted ``lax.scan`` of 10 iterations on the Olivetti faces (320 x 4096, layers 100/40/15) when
the data directory has them, else Poisson(3) counts of that shape.

Usage::

    python -m benchmarks.numpyro_adapter --repeats 10
"""

import argparse
import os
import statistics
import time

import jax

from benchmarks.bench_def_peers import olivetti_or_poisson
from grepvi.estimators.base import get_estimator
from grepvi.inference.state import init, step
from grepvi.interop.numpyro_examples import sparse_gamma_def_model
from grepvi.interop.numpyro_model import from_numpyro
from grepvi.models import sparse_gamma_def
from grepvi.optim.advi import advi_stepsize


def runner(target, data, chunk=10):
    estimator, optimizer = get_estimator("grep"), advi_stepsize(0.5)
    program = jax.jit(
        lambda s, d: jax.lax.scan(
            lambda c, _: (step(c, target, estimator, optimizer, d)[0], None), s, None, chunk
        )[0]
    )
    state = [init(jax.random.key(0), target, optimizer)]
    start = time.perf_counter()
    state[0] = jax.block_until_ready(program(state[0], data))
    compile_seconds = time.perf_counter() - start

    def run():
        begin = time.perf_counter()
        state[0] = jax.block_until_ready(program(state[0], data))
        return (time.perf_counter() - begin) / chunk

    return run, compile_seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    x, source = olivetti_or_poisson(os.environ.get("GREPVI_DATA_DIR"))
    named = sparse_gamma_def(x)
    adapted = from_numpyro(sparse_gamma_def_model, x)
    contenders = {
        "grepvi named-axis DEF": runner(named.target(), named.data),
        "NumPyro DEF via from_numpyro": runner(adapted.target(), adapted.data),
    }
    times = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, (run, _) in contenders.items():
            times[name].append(run())
    base = statistics.median(times["grepvi named-axis DEF"])
    print(f"sparse gamma DEF, {source}, G-REP, median of {args.repeats} interleaved chunks of 10")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"  {name:30s} {1e3 * median:7.1f} ms/iteration (x{median / base:.2f}), "
            f"compile {contenders[name][1]:.1f} s"
        )


if __name__ == "__main__":
    main()

"""Speed of the data-parallel step (:mod:`grepvi.inference.sharding`) on 1, 2, ... simulated CPU devices.

Each device count runs in its own process (``XLA_FLAGS=--xla_force_host_platform_device_count``
must be set before JAX starts): the sparse gamma DEF at the Olivetti size (N=320, D=4096,
layers 100/40/15; the Olivetti faces when the data directory has them, else Poisson(3)
counts), G-REP, chunks of ``--chunk`` steps in a jitted ``lax.scan``; the median time per
iteration over ``--repeats`` chunks, and the ratio to one device. On a CPU the devices share
the machine's cores, so this measures the overhead of the layout as much as a speed-up; on
several GPUs each device brings its own compute.

Usage::

    python -m benchmarks.data_parallel --devices 1,2 --repeats 5
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, statistics, sys, time
    import jax, numpy as np
    from benchmarks.bench_def_peers import olivetti_or_poisson
    from grepvi.estimators.base import get_estimator
    from grepvi.inference.state import init, step
    from grepvi.models import sparse_gamma_def
    from grepvi.optim.advi import advi_stepsize
    from grepvi.inference.sharding import data_parallel

    chunk, repeats = int(sys.argv[1]), int(sys.argv[2])
    data, source = olivetti_or_poisson(os.environ.get("GREPVI_DATA_DIR"), 0)
    model = sparse_gamma_def(data)
    target = model.target()
    estimator, optimizer = get_estimator("grep"), advi_stepsize(0.5)
    parallel = data_parallel(target, estimator, optimizer, model)
    state = parallel.place_state(init(jax.random.key(0), target, optimizer))
    placed = parallel.place_data(model.data)

    program = jax.jit(lambda s, d: jax.lax.scan(
        lambda c, _: (step(c, target, estimator, optimizer, d)[0], None), s, None, length=chunk)[0])
    state = jax.block_until_ready(program(state, placed))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        state = jax.block_until_ready(program(state, placed))
        times.append((time.perf_counter() - start) / chunk)
    print(json.dumps({"devices": len(jax.devices()), "ms": 1e3 * statistics.median(times), "data": source}))
    """
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    results = []
    for count in [int(c) for c in args.devices.split(",")]:
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={count}"
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.chunk), str(args.repeats)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(done.stderr)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = results[0]["ms"]
    print(f"sparse gamma DEF, Olivetti size ({results[0]['data']}), G-REP, ms per iteration:")
    for row in results:
        print(f"  {row['devices']} device(s): {row['ms']:.1f} ms (x{base / row['ms']:.2f})")
    return results


if __name__ == "__main__":
    main()

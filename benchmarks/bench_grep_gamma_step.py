"""One G-REP step for a gamma latent of 460,000 elements vs ``jax.random.gamma``'s own time.

The step draws ``log z`` (``grepvi.sampling.log_gamma``), standardizes, evaluates a
gamma-Poisson log joint and its local terms, differentiates the surrogate, and applies the
ADVI step size (paper Eq. 9). The peer is the draw alone with ``jax.random.gamma``, which
is where a straightforward JAX G-REP spends most of its time. Contenders are interleaved
and the medians of wall and CPU time reported, so the ratio survives a loaded machine.

    python benchmarks/bench_grep_gamma_step.py --size 460000 --repeats 30
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import grepvi
from grepvi.inference import state as inference


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=460_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)

    size = args.size
    counts = jax.random.poisson(jax.random.key(1), 2.0, (size,)).astype(jnp.float32)

    def local(z):
        rate = z["rate"]
        return {"rate": (0.1 - 1.0 + counts) * jnp.log(rate) - (0.3 + 1.0) * rate}

    def logdensity_fn(z):
        return jnp.sum(local(z)["rate"])

    family = grepvi.Gamma(shape=(size,), init_concentration=0.1, init_mean=1.0)
    target = grepvi.make_target(logdensity_fn, {"rate": family}, local)
    estimator = grepvi.get_estimator("grep")
    optimizer = grepvi.advi_stepsize(0.5)
    state = inference.init(jax.random.key(0), target, optimizer)

    step = jax.jit(lambda s: inference.step(s, target, estimator, optimizer)[0])
    shapes = jnp.full((size,), 0.1, jnp.float32)
    draw = jax.jit(lambda key: jax.random.gamma(key, shapes))

    state = step(state)
    jax.block_until_ready(state)
    jax.block_until_ready(draw(jax.random.key(2)))

    times = {"grep step": [], "jax.random.gamma draw": []}
    cpu = {"grep step": [], "jax.random.gamma draw": []}
    for i in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        state = step(state)
        jax.block_until_ready(state)
        times["grep step"].append(time.perf_counter() - t0)
        cpu["grep step"].append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(draw(jax.random.key(3 + i)))
        times["jax.random.gamma draw"].append(time.perf_counter() - t0)
        cpu["jax.random.gamma draw"].append(time.process_time() - c0)

    base = np.median(times["jax.random.gamma draw"])
    base_cpu = np.median(cpu["jax.random.gamma draw"])
    print(f"gamma latent of {size:,} elements, shape 0.1, {args.repeats} interleaved repeats")
    print("| contender | median wall ms | median CPU ms | wall / jax.random.gamma | CPU / jax.random.gamma |")
    print("|---|---|---|---|---|")
    for name in times:
        wall, proc = np.median(times[name]), np.median(cpu[name])
        print(f"| {name} | {wall * 1e3:.1f} | {proc * 1e3:.1f} | {wall / base:.2f} | {proc / base_cpu:.2f} |")


if __name__ == "__main__":
    main()

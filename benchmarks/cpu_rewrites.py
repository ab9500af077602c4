"""The CPU rewrites of a model's slow primitives against the primitives themselves.

For each case, the same log density's value and gradient under ``vmap`` over draws, run as
a 100-step ``fori_loop`` (as a window of the default procedure runs its steps), once as JAX
traces it and once through :func:`grepvi.inference.cpu_rewrites.cpu_rewritten`; each is
compiled in this process (its own ``jax.jit``, no cache) and timed (best of 5 runs). Printed:
compile seconds and milliseconds a step of each, and the ratios native / rewritten (above 1:
the rewrite is faster)::

    python benchmarks/cpu_rewrites.py
    python benchmarks/cpu_rewrites.py --cases product:4 cumlogsumexp:1000 --draws 16 64

Cases: ``product:n`` (a 50-trip ``scan`` of ``a @ c @ b.T``, ``n x n`` matrices built from
the latents), ``kalman`` (a local-linear-trend filter of 120 points, 2x2 products),
``cumlogsumexp:N``, ``cumprod:N``, ``cummax:N`` (a reverse cumulative reduction of ``N``
elements, as a Cox partial likelihood's risk sets).
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from grepvi.inference.cpu_rewrites import cpu_rewritten

DEFAULT_CASES = [
    "product:2",
    "product:4",
    "product:8",
    "kalman",
    "cumlogsumexp:250",
    "cumlogsumexp:1000",
    "cumprod:1000",
    "cummax:1000",
]


def _product_case(n: int):
    b = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)) * 0.1, jnp.float32)

    def logdensity(z):
        a = jnp.tanh(z.reshape(n, n)) * 0.3

        def trip(c, _):
            return a @ c @ b.T + jnp.eye(n), None

        c, _ = lax.scan(trip, a, None, length=50)
        return -0.5 * jnp.sum(c**2)

    return logdensity, n * n


def _kalman_case():
    y = jnp.asarray(np.cumsum(np.random.default_rng(1).normal(size=120)), jnp.float32)
    transition = jnp.array([[1.0, 1.0], [0.0, 1.0]])

    def logdensity(z):
        noise, obs_var = jnp.diag(jnp.exp(2.0 * z[1:])), jnp.exp(2.0 * z[0])

        def step(carry, y_t):
            mean, cov = carry
            mean, cov = transition @ mean, transition @ cov @ transition.T + noise
            s = cov[0, 0] + obs_var
            residual = y_t - mean[0]
            k = cov[:, 0] / s
            return (mean + k * residual, cov - s * jnp.outer(k, k)), -0.5 * (jnp.log(s) + residual**2 / s)

        _, terms = lax.scan(step, (jnp.stack([y[0], 0.0]), jnp.eye(2)), y)
        return jnp.sum(terms)

    return logdensity, 3


def _cumulative_case(name: str, size: int):
    reduction = {"cumlogsumexp": lax.cumlogsumexp, "cumprod": lax.cumprod, "cummax": lax.cummax}[name]
    rng = np.random.default_rng(2)
    w = jnp.asarray(rng.normal(size=size), jnp.float32)
    event = jnp.asarray(rng.integers(0, 2, size), jnp.float32)

    def logdensity(z):
        eta = jnp.tanh(w * z[0] + z[1]) * 0.1 + 1.0
        return jnp.sum(event * (eta - reduction(eta, reverse=True)))

    return logdensity, 2


def _case(name: str):
    kind, _, size = name.partition(":")
    if kind == "product":
        return _product_case(int(size))
    if kind == "kalman":
        return _kalman_case()
    return _cumulative_case(kind, int(size))


def _timed(logdensity, dimension: int, draws: int) -> tuple[float, float]:
    """(compile s, run ms a step) of 100 steps of the value and gradient under vmap."""
    batched = jax.vmap(jax.value_and_grad(logdensity))

    def window(z):
        def body(_, total):
            _, gradient = batched(z + 1e-6 * total)
            return total + gradient

        return lax.fori_loop(0, 100, body, jnp.zeros_like(z))

    z = jnp.full((draws, dimension), 0.1, jnp.float32)
    lowered = jax.jit(window).lower(z)
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start
    compiled(z).block_until_ready()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        compiled(z).block_until_ready()
        runs.append(time.perf_counter() - start)
    return compile_seconds, min(runs) / 100 * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    parser.add_argument("--draws", nargs="+", type=int, default=[16, 64])
    args = parser.parse_args(argv)
    print("case                 draws  compile s: native  rewritten  ms a step: native  rewritten  ratios")
    for name in args.cases:
        logdensity, dimension = _case(name)
        for draws in args.draws:
            native = _timed(logdensity, dimension, draws)
            rewritten = _timed(cpu_rewritten(logdensity), dimension, draws)
            print(
                f"{name:20s} {draws:5d}  {native[0]:13.2f} {rewritten[0]:10.2f}  "
                f"{native[1]:14.3f} {rewritten[1]:10.3f}  "
                f"compile {native[0] / rewritten[0]:5.2f} step {native[1] / rewritten[1]:5.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

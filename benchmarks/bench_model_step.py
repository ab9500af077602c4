"""Time of one jitted iteration on the paper's models at the paper's sizes, G-REP vs ADVI.

* sparse gamma DEF at the Olivetti size: N = 320, D = 4096, layers 100/40/15 (463,800 gamma
  latents), on synthetic Poisson counts of that shape;
* beta-gamma MF at the MNIST size: N = 5000, D = 784, K = 100, on synthetic binary data.

One iteration is ``grepvi.inference.state.step`` (draw, gradient, non-finite guard, ADVI step
size), jitted. Contenders:

* ``grep``: the registered G-REP estimator; its surrogate calls ``logdensity_fn(z)`` and
  ``local_logdensity_fn(stop_gradient(z))`` separately.
* ``grep-fused``: the same surrogate with both from one ``logdensity_and_local_fn(z)`` call
  (the factors evaluated once by construction), to measure whether XLA already shares the
  work of the two calls (the ``(N, D)`` rate matrix ``z1 W0`` and its ``log``).
* ``grep-full``: G-REP without local log joints (whole log joint in the correction).
* ``advi``: the registered ADVI with its defaults (1 gradient draw, and 20 further draws of
  the log joint for the reported ELBO, as in the paper); ``advi-grad``: the gradient draw
  only (``num_elbo_samples=0``), the cost comparable to one G-REP iteration.

Contenders are interleaved, repeated, and the medians of wall and CPU (process) time are
reported, so that ratios survive a shared machine. The number of ``dot`` instructions in each
compiled step is printed too (the DEF's rate matrix is one ``dot`` forward and two backward).

    python benchmarks/bench_model_step.py --repeats 10
    python benchmarks/bench_model_step.py --models def --contenders grep grep-fused
"""

import argparse
import functools
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

import grepvi
from grepvi.estimators.base import (
    EstimateInfo,
    Estimator,
    sample_standardized,
    total_entropy,
    transform_all,
)
from grepvi.inference import state as inference
from grepvi.models import beta_gamma_mf, sparse_gamma_def

CONTENDERS = ("grep-closed-form", "grep", "grep-fused", "grep-full", "advi", "advi-grad")


def fused_grep(logdensity_and_local_fn) -> Estimator:
    """G-REP whose surrogate takes the log joint and the local log joints from one call
    (``logdensity_and_local_fn(latents, data)``; the data comes with the bound target)."""

    def surrogate(params, eps, target):
        families = target.families
        latents = transform_all(params, eps, families)
        log_joint, local = logdensity_and_local_fn(latents, target.bound_data)
        correction = 0.0
        for name, family in families.items():
            log_q_eps = family.log_prob_standardized(params[name], eps[name])
            correction = correction + jnp.sum(jax.lax.stop_gradient(local[name]) * log_q_eps)
        elbo = log_joint + total_entropy(params, families)
        return elbo + correction - jax.lax.stop_gradient(correction), elbo

    def estimate(rng_key, params, target):
        eps = sample_standardized(rng_key, params, target.families)
        grad, elbo = jax.grad(surrogate, has_aux=True)(params, eps, target)
        return grad, EstimateInfo(elbo=elbo, extras={})

    return Estimator(name="grep-fused", estimate=estimate)


def make_models(names, seed):
    rng = np.random.default_rng(seed)
    models = {}
    if "def" in names:
        # Olivetti-like counts: per-image brightness times a per-pixel pattern, 0..255.
        brightness = rng.gamma(2.0, 40.0, size=(320, 1))
        pattern = rng.gamma(2.0, 0.5, size=(1, 4096))
        counts = np.minimum(rng.poisson(brightness * pattern), 255)
        models["sparse gamma DEF 320x4096 (100/40/15)"] = sparse_gamma_def(counts)
    if "mf" in names:
        probability = rng.beta(0.3, 0.7, size=(5000, 784))
        models["beta-gamma MF 5000x784 (K=100)"] = beta_gamma_mf(rng.random((5000, 784)) < probability)
    return models


def build_step(model, contender, step_size):
    if contender == "grep-fused":
        estimator = fused_grep(model.logdensity_and_local_fn)
        use_local = True
    elif contender == "grep-full":
        estimator, use_local = grepvi.get_estimator("grep"), False
    elif contender == "advi-grad":
        estimator, use_local = grepvi.get_estimator("advi", num_elbo_samples=0), False
    else:
        estimator, use_local = grepvi.get_estimator(contender), contender != "advi"
    families = estimator.adapt_families(model.latents())
    target = model.target(families, use_local=use_local)
    optimizer = grepvi.advi_stepsize(step_size)
    state = inference.init(jax.random.key(0), target, optimizer)
    step = jax.jit(lambda s, data: inference.step(s, target, estimator, optimizer, data))
    start = time.perf_counter()
    compiled = step.lower(state, model.data).compile()
    compile_seconds = time.perf_counter() - start
    dots = len(re.findall(r"\bdot\(", compiled.as_text()))
    state, info = compiled(state, model.data)
    jax.block_until_ready(state)
    return functools.partial(_call, compiled, model.data), state, compile_seconds, dots


def _call(compiled, data, state):
    return compiled(state, data)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["def", "mf"], choices=["def", "mf"])
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--step-size", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    available = set(grepvi.estimator_names())
    contenders = [c for c in args.contenders if c.split("-")[0] in available]
    platform = jax.devices()[0].platform
    print(f"jax {jax.__version__} on {platform}, {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    rows = []
    for label, model in make_models(args.models, args.seed).items():
        steps, states, info = {}, {}, {}
        for contender in contenders:
            steps[contender], states[contender], compile_seconds, dots = build_step(
                model, contender, args.step_size
            )
            info[contender] = (compile_seconds, dots)
        wall = {c: [] for c in contenders}
        cpu = {c: [] for c in contenders}
        for _ in range(args.repeats):
            for contender in contenders:  # interleaved
                t0, c0 = time.perf_counter(), time.process_time()
                states[contender], step_info = steps[contender](states[contender])
                jax.block_until_ready(states[contender])
                wall[contender].append(time.perf_counter() - t0)
                cpu[contender].append(time.process_time() - c0)
        for contender in contenders:
            rows.append(
                (
                    label,
                    contender,
                    float(np.median(wall[contender])),
                    float(np.median(cpu[contender])),
                    *info[contender],
                )
            )
    print()
    header = f"{'model':40s} {'contender':11s} {'wall s':>8s} {'cpu s':>8s} {'compile s':>9s} {'dots':>5s}"
    print(header)
    print("-" * len(header))
    for label, contender, wall_s, cpu_s, compile_s, dots in rows:
        print(f"{label:40s} {contender:11s} {wall_s:8.3f} {cpu_s:8.3f} {compile_s:9.1f} {dots:5d}")
    print()
    by_key = {(r[0], r[1]): r for r in rows}
    for label in dict.fromkeys(r[0] for r in rows):
        for numerator, denominator in (
            ("grep", "advi"),
            ("grep", "advi-grad"),
            ("grep-fused", "grep"),
            ("grep", "grep-full"),
        ):
            if (label, numerator) in by_key and (label, denominator) in by_key:
                a, b = by_key[(label, numerator)], by_key[(label, denominator)]
                print(f"{label:40s} {numerator}/{denominator}: wall {a[2] / b[2]:.2f}, cpu {a[3] / b[3]:.2f}")


if __name__ == "__main__":
    main()

"""Cost of log-space model inputs: one G-REP step on the paper's models, log space vs values.

The built-in models take their latents in log space (``Model.log_space``): the DEF computes
its rate and prior means as ``log_matmul_exp(log z, log W)`` (two extra ``exp``, a ``log`` and
a scaled backward pass) instead of ``z @ W``. The value-space contender is the same model
through ``model.logdensity_fn`` (values converted to log space inside: the families' clamped
``z``). Both steps are jitted, interleaved and repeated; the medians and their ratio are
printed (ratios survive a shared machine).

    python benchmarks/log_space_cost.py --repeats 7
"""

import argparse
import time

import jax
import numpy as np

from grepvi.estimators import get_estimator
from grepvi.inference import state as inference
from grepvi.models import beta_gamma_mf, sparse_gamma_def
from grepvi.optim.advi import advi_stepsize
from grepvi.target import Target


def models():
    rng = np.random.default_rng(0)
    yield (
        "sparse gamma DEF, Olivetti size (320 x 4096)",
        sparse_gamma_def(rng.poisson(3.0, (320, 4096)).astype(np.float32)),
    )
    yield (
        "beta-gamma MF, MNIST size (5000 x 784)",
        beta_gamma_mf((rng.random((5000, 784)) < 0.2).astype(np.float32)),
    )


def step_fn(target, estimator, optimizer):
    @jax.jit
    def run(state, data):
        def body(state, _):
            return inference.step(state, target, estimator, optimizer, data)[0], None

        return jax.lax.scan(body, state, None, length=10)[0]

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    estimator, optimizer = get_estimator("grep"), advi_stepsize(0.5)
    for label, model in models():
        families = model.latents()
        contenders = {
            "log space": model.target(families),
            "values": Target(model.logdensity_fn, families, model.local_logdensity_fn, takes_data=True),
        }
        runs, states = {}, {}
        for name, target in contenders.items():
            runs[name] = step_fn(target, estimator, optimizer)
            states[name] = inference.init(jax.random.key(0), target, optimizer)
            jax.block_until_ready(runs[name](states[name], model.data))  # compile
        times = {name: [] for name in contenders}
        for _ in range(args.repeats):
            for name in contenders:
                start = time.perf_counter()
                jax.block_until_ready(runs[name](states[name], model.data))
                times[name].append((time.perf_counter() - start) / 10)
        medians = {name: float(np.median(t)) for name, t in times.items()}
        print(
            f"{label}: log space {1e3 * medians['log space']:.1f} ms/step, values "
            f"{1e3 * medians['values']:.1f} ms/step, ratio {medians['log space'] / medians['values']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

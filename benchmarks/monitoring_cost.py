"""What the default procedure's monitoring costs: a window of the procedure (steps plus the sum
of the iterates for averaging, per-iteration ELBO and finiteness outputs) and the controller's
work between windows (trend test, batch means, Fisher-metric error), against the bare steps
(``lax.scan`` of ``inference.step``, outputs dropped), same model, same process, interleaved.

Run: ``python -m benchmarks.monitoring_cost [--dataset olivetti] [--repeats 5]``; without the
data sets, a simulated DEF of the same size is used.
"""

import argparse
import time

import jax
import numpy as np
import optax
from grepvi.adaptive import AdaptiveSettings, Candidate, run_adaptive
from grepvi.loop import make_window

from grepvi import experiments
from grepvi.inference import init, step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="olivetti")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args(argv)
    config = experiments.RunConfig(
        model="sparse-gamma-def", dataset=args.dataset, estimator="grep", num_steps=1
    ).validate()
    dataset = experiments.load_data(config)
    model = experiments.build_model(config, dataset.train)
    estimator = experiments.make_estimator(config)
    target = model.target(estimator.adapt_families(model.latents()))
    optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=0.01)
    state = init(jax.random.key(0), target, optimizer)
    length = args.window

    data = model.data

    @jax.jit
    def bare_program(s, data):
        return jax.lax.scan(
            lambda c, _: (step(c, target, estimator, optimizer, data)[0], None), s, None, length=length
        )[0]

    def bare(s):
        return bare_program(s, data)

    window = make_window(target, estimator, optimizer, length, data)
    settings = AdaptiveSettings(window=length)
    jax.block_until_ready(bare(state))
    jax.block_until_ready(window(state))
    bare_times, window_times, controller_times = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        jax.block_until_ready(bare(state))
        bare_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(window(state))
        window_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        run_adaptive(
            [Candidate("adam", state, window, 0.01)],
            target.families,
            settings,
            max_steps=4 * length,
            time_budget=None,
        )
        controller_times.append((time.perf_counter() - start) / 4)
    b, w, c = (float(np.median(t)) / length * 1e3 for t in (bare_times, window_times, controller_times))
    elements = sum(int(np.prod(f.shape)) for f in target.families.values())
    print(f"{dataset.name}: {elements} latent elements, jax {jax.__version__}")
    print(f"bare steps                      {b:8.3f} ms/iteration  1.000")
    print(f"window (sums, outputs)          {w:8.3f} ms/iteration  {w / b:.3f}")
    print(f"procedure (window + controller) {c:8.3f} ms/iteration  {c / b:.3f}")


if __name__ == "__main__":
    main()

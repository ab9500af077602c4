"""A NumPyro plate with ``subsample_size`` fitted as minibatch VI against the full-data fit.

Bayesian logistic regression (5 weights, ``Normal(0, 1)`` prior) on ``N`` synthetic rows,
``numpyro.plate("obs", N, subsample_size=B)``; ``from_numpyro(model, x, y).fit(batch_size=B)``
(minibatch, ``B`` random rows per step) and ``.fit(batch_size=None)`` (every row, what
``fit()`` chooses where a full-data step is small: ``NumPyroModel.default_batch_size``), the
default procedure for the same time budget each. Prints time per step (from the trace's last 1,000 steps), the
posterior means and sds, and their differences in full-data posterior sds.

Usage::

    python -m benchmarks.numpyro_subsample --rows 100000 --batch 1000 --time-budget 120
"""

import argparse
import time
import warnings

import jax.numpy as jnp
import numpy as np


def main() -> None:
    import numpyro
    import numpyro.distributions as dist

    from grepvi.interop.numpyro_model import from_numpyro

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--time-budget", type=float, default=120.0)
    options = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(options.rows, 5)).astype(np.float32)
    y = (rng.random(options.rows) < 1 / (1 + np.exp(-x @ np.array([1.0, -2.0, 0.5, 0.0, 1.5])))).astype(
        np.float32
    )

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("obs", x.shape[0], subsample_size=options.batch):
            logits = numpyro.subsample(x, event_dim=1) @ w
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=numpyro.subsample(y, event_dim=0))

    adapted = from_numpyro(model, jnp.asarray(x), jnp.asarray(y))
    answers = {}
    for label, extra in (("minibatch", {"batch_size": options.batch}), ("full data", {"batch_size": None})):
        start = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = adapted.fit(progress=False, time_budget=options.time_budget, **extra)
        wall = np.asarray(result.trace.wall_time)
        last = min(1000, wall.size - 1)
        q = result.posterior["w"]
        answers[label] = np.asarray(q.mean()), np.sqrt(np.asarray(q.variance()))
        print(
            f"{label}: {time.time() - start:.1f} s, {result.convergence.num_iterations} steps, "
            f"{(wall[-1] - wall[-1 - last]) / last * 1e3:.2f} ms/step, converged={result.converged} "
            f"(accuracy {float(result.convergence.accuracy):.3g} sd)"
        )
        print(f"  mean {np.round(answers[label][0], 4)}  sd {np.round(answers[label][1], 4)}")
    (mean, sd), (full_mean, full_sd) = answers["minibatch"], answers["full data"]
    print(f"mean difference / full-data sd: {np.round((mean - full_mean) / full_sd, 3)}")
    print(f"sd ratio: {np.round(sd / full_sd, 3)}")


if __name__ == "__main__":
    main()

"""Per-draw gradient variance and time per gradient of every estimator on two conjugate toys.

For gamma-Poisson and beta-Bernoulli (``grepvi.testing``), at variational shapes 0.1, 1 and 10
(gamma: shape ``alpha`` with mean 2; beta: ``alpha`` with ``beta = 2``), each estimator is
called ``--num-draws`` times (BBVI: a fifth of that) and the sample variance of every gradient
component is taken across calls. The table reports the *per-draw* variance, averaged over the
components (concentration and mean, or the two beta shapes): the variance of one call times
the number of draws it averages (30 for BBVI), i.e. the variance a single draw would have.
Variances are computed in float64 (in float32, 1 in 4,000 gamma draws at shape 0.1 underflows;
see ``tests/test_estimators_unbiased.py``).

ADVI optimizes a different family: here it is evaluated at the log-normal (logit-normal) whose
``log z`` (``logit z``) has the same mean and variance as under the gamma (beta), and its
components are ``(loc, scale)``, so its variances are not the same quantities as the others'.

Time: one gradient estimate of a one-element latent at shape 1, in float32 (the library
default), ``jax.jit(jax.vmap(estimate))`` over a batch of 10,000 keys, median of
``--repeats`` runs, divided by the batch size.

Usage::

    python benchmarks/variance_table.py [--num-draws 100000] [--output benchmarks/variance_table.csv]
"""

import argparse
import csv
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import grepvi
from grepvi import numerics, testing
from grepvi.target import Target

SHAPES = (0.1, 1.0, 10.0)

# (label, registry name, options, family options for the beta model)
ESTIMATORS = [
    ("grep", "grep", {}, {}),
    (
        "grep-closed-form (beta: zero-correction, biased)",
        "grep-closed-form",
        {},
        {"standardization": "zero-correction"},
    ),
    ("implicit", "implicit", {}, {}),
    ("rsvi B=4", "rsvi", {"boost": 4}, {}),
    ("rsvi B=1", "rsvi", {"boost": 1}, {}),
    ("bbvi (30 + 30 draws)", "bbvi", {}, {}),
    (
        "score function (1 draw, no control variates)",
        "bbvi",
        {"num_samples": 1, "num_control_samples": 0},
        {},
    ),
    ("advi (moment-matched Gaussian)", "advi", {"num_elbo_samples": 0}, {}),
]


def _model(model_name, shape, family_options):
    if model_name == "gamma-poisson":
        return testing.gamma_poisson(shape=shape)
    return testing.beta_bernoulli(shape=shape, **family_options)


def _params(model, shapes, adapted, dtype):
    ((name, family),) = model.families.items()
    shapes = jnp.asarray(shapes, dtype)
    other = jnp.full_like(shapes, 2.0)
    if isinstance(family, grepvi.Gamma):
        natural = (shapes, shapes / other)  # shape, rate
        loc, variance = numerics.digamma(natural[0]) - jnp.log(natural[1]), numerics.trigamma(natural[0])
        params = {
            "concentration": numerics.inverse_softplus(shapes),
            "mean": numerics.inverse_softplus(other),
        }
    else:
        loc = numerics.digamma(shapes) - numerics.digamma(other)
        variance = numerics.trigamma(shapes) + numerics.trigamma(other)
        params = {
            "concentration1": numerics.inverse_softplus(shapes),
            "concentration0": numerics.inverse_softplus(other),
        }
    if adapted is not family:
        params = {"loc": loc, "scale": numerics.inverse_softplus(jnp.sqrt(variance))}
    return {name: params}


def _setup(model_name, name, options, family_options, shape, dtype):
    model = _model(model_name, shape, family_options)
    estimator = grepvi.get_estimator(name, **options)
    families = estimator.adapt_families(model.families)
    (latent,) = families
    target = Target(model.logdensity_fn, families, model.local_logdensity_fn)
    values = SHAPES if shape else 1.0
    params = _params(model, values, families[latent], dtype)
    return estimator, target, params


def measure_variance(model_name, name, options, family_options, num_draws, seed):
    with jax.enable_x64(True):
        estimator, target, params = _setup(
            model_name, name, options, family_options, (len(SHAPES),), jnp.float64
        )
        draws = testing.gradient_draws(estimator, target, params, jax.random.key(seed), num_draws)
    per_call = draws.var(0, ddof=1)  # components: leaf 0 for the 3 shapes, then leaf 1
    per_draw = per_call * options.get("num_samples", 30 if name == "bbvi" else 1)
    finite = np.isfinite(draws).all(1).mean()
    return per_draw.reshape(-1, len(SHAPES)).mean(0), finite


def measure_time(model_name, name, options, family_options, repeats, batch_size=10_000):
    estimator, target, params = _setup(model_name, name, options, family_options, (), jnp.float32)
    batch = jax.jit(jax.vmap(lambda key: estimator.estimate(key, params, target)[0]))
    keys = jax.random.split(jax.random.key(0), batch_size)
    jax.block_until_ready(batch(keys))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(batch(keys))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / batch_size * 1e6


def main(args):
    rows = []
    for model_name in ("gamma-poisson", "beta-bernoulli"):
        for label, name, options, family_options in ESTIMATORS:
            num_draws = (
                args.num_draws // 5 if name == "bbvi" and "num_samples" not in options else args.num_draws
            )
            variance, finite = measure_variance(
                model_name, name, options, family_options, num_draws, args.seed
            )
            microseconds = measure_time(model_name, name, options, family_options, args.repeats)
            draws_per_call = options.get("num_samples", 30 if name == "bbvi" else 1)
            if name == "bbvi" and options.get("num_control_samples", 30):
                draws_per_call += options.get("num_control_samples", 30)
            rows.append(
                {
                    "model": model_name,
                    "estimator": label,
                    **{f"variance_shape_{s:g}": float(v) for s, v in zip(SHAPES, variance, strict=True)},
                    "draws_per_call": draws_per_call,
                    "microseconds_per_call": microseconds,
                    "num_calls": num_draws,
                    "finite_fraction": float(finite),
                }
            )
            print(f"done: {model_name} {label}", flush=True)
    columns = list(rows[0])
    if args.output:
        with open(args.output, "w", newline="") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
    header = "| model | estimator | " + " | ".join(f"var. per draw, shape {s:g}" for s in SHAPES)
    print(header + " | draws per call | µs per call |")
    print("|" + "---|" * (len(SHAPES) + 4))
    for row in rows:
        cells = [f"{row[f'variance_shape_{s:g}']:.3g}" for s in SHAPES]
        print(
            f"| {row['model']} | {row['estimator']} | "
            + " | ".join(cells)
            + f" | {row['draws_per_call']} | {row['microseconds_per_call']:.2f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-draws", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/variance_table.csv")
    main(parser.parse_args())

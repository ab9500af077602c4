"""Time one iteration of G-REP against ADVI, Pyro, NumPyro and the floor of its parts.

Sections (``--sections``, any of ``def,mf,minibatch``):

* ``def``: the sparse gamma DEF at the Olivetti size (N=320, D=4096, layers 100/40/15, float32,
  one Monte Carlo sample) on the Olivetti training faces when the data directory has them
  (``--data-dir``, else ``$GREPVI_DATA_DIR``, else ``../shared/data``), else Poisson(3) counts of
  that shape. Contenders: grepvi G-REP (:func:`grepvi.inference.state.step` in a jitted ``lax.scan``
  of 10 iterations, as :func:`grepvi.fit` runs it; and one jitted step per call), grepvi ADVI
  (gradient draw only, and with its default 20 extra draws for the reported ELBO), Pyro
  (``Trace_ELBO``, gamma guide, PyTorch's pathwise gamma gradients) and NumPyro
  (``Trace_ELBO``, gamma guide, implicit gradients, jitted update). A peer that is not
  installed is skipped with a message (``pip install -e '.[peers]'``).
  The *floor* is timed in the same loop from the parts of one G-REP iteration: the three
  ``320 x 100 x 4096`` matmuls (the Poisson rate and its two gradients), 463,800 log-gamma
  draws (:func:`grepvi.sampling.log_gamma`), digamma, trigamma, tetragamma and lgamma over
  463,800 elements (:mod:`grepvi.numerics`), and one fused elementwise pass over the ``N x D``
  likelihood (value and gradient) and over the 463,800 parameters (each part jitted alone;
  the floor is the sum of their medians).
* ``mf``: the beta-gamma MF (K=100) at the binarized-MNIST size (5000 x 784) and the
  Omniglot size (4425 x 11025): grepvi G-REP and ADVI (paper: 1.09 s and 5.50 s per G-REP
  iteration).
* ``minibatch``: the full Omniglot set (all 32,460 images of 11,025 pixels: the train and
  test drawers together) by :func:`grepvi.inference.minibatch.minibatch_step`, beta-gamma MF K=100,
  batches of ``--batch-size``; a few timed steps, the time per epoch extrapolated from them.

Timing: every contender is compiled and warmed up first; then ``--repeats`` rounds call each
contender once in turn (interleaved, so that load from other jobs on a shared machine falls
on all of them alike), and the table gives the median wall time per iteration and its ratio
to grepvi G-REP. The last line gives the peak resident memory of the process
(``resource.getrusage``, which includes every contender loaded).

Usage (from the repository root)::

    python -m benchmarks.bench_def_peers --sections def --repeats 15 --csv def.csv
"""

import argparse
import csv
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.estimators.base import get_estimator
from grepvi.inference.state import init, step
from grepvi.optim.advi import advi_stepsize
from grepvi.sampling import log_gamma

__all__ = ["main", "parse_args", "def_contenders", "floor_contenders", "mf_contenders", "time_interleaved"]

OLIVETTI_SIZE = (320, 4096)
LAYER_SIZES = (100, 40, 15)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="def", help="comma-separated: def, mf, minibatch")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (def)")
    parser.add_argument("--mf-repeats", type=int, default=5, help="timed rounds (mf)")
    parser.add_argument("--peers", default="pyro,numpyro", help="peers to time ('' for none)")
    parser.add_argument(
        "--grep-only", action="store_true", help="def: time grepvi G-REP alone (for its peak memory)"
    )
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batch-size", type=int, default=1000, help="minibatch section")
    parser.add_argument("--minibatch-steps", type=int, default=5, help="timed minibatch steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="write the rows to this CSV file")
    return parser.parse_args(argv)


def data_dir(argument=None):
    """``--data-dir``, else ``$GREPVI_DATA_DIR``, else ``../shared/data``; None if absent."""
    for candidate in (argument, os.environ.get("GREPVI_DATA_DIR"), Path(__file__).parents[2] / "shared/data"):
        if candidate and Path(candidate).is_dir():
            return str(candidate)
    return None


def olivetti_or_poisson(directory, seed=0):
    """The 320 Olivetti training faces, or Poisson(3) counts of that shape; and its name."""
    if directory is not None:
        try:
            from grepvi.data import load_dataset

            return np.asarray(load_dataset("olivetti", directory).train), "olivetti train faces"
        except Exception as error:  # noqa: BLE001 - fall back to synthetic data of the same shape
            print(f"olivetti not loaded ({error}); using Poisson data", file=sys.stderr)
    rng = np.random.default_rng(seed)
    return rng.poisson(3.0, OLIVETTI_SIZE).astype(np.float32), "Poisson(3) counts"


def grepvi_step(model, estimator, seed=0, learning_rate=0.5, chunk=10):
    """A no-argument function running ``chunk`` iterations the way :func:`grepvi.fit` does.

    ``fit`` runs :func:`grepvi.inference.state.step` inside a jitted ``lax.scan`` of a chunk of
    iterations; so does this (``chunk=1``: one jitted step per call). The function carries
    the state from call to call and has ``iterations = chunk``; :func:`time_interleaved`
    reports the time per iteration.
    """
    estimator = get_estimator(estimator) if isinstance(estimator, str) else estimator
    target = model.target()
    target = target._replace(families=estimator.adapt_families(target.families))
    optimizer = advi_stepsize(learning_rate)

    def chunk_fn(state, data):
        return jax.lax.scan(
            lambda s, _: step(s, target, estimator, optimizer, data), state, None, length=chunk
        )

    jitted = jax.jit(chunk_fn, donate_argnums=0)
    holder = [init(jax.random.key(seed), target, optimizer)]
    data = model.data

    def run():
        holder[0], info = jitted(holder[0], data)
        return jax.block_until_ready(info.elbo)

    run.iterations = chunk
    return run


def def_contenders(data, peers, seed=0):
    from grepvi.models import sparse_gamma_def

    model = sparse_gamma_def(data, LAYER_SIZES)
    contenders = {
        "grepvi G-REP": grepvi_step(model, "grep", seed),
        "grepvi G-REP (one jitted step per call)": grepvi_step(model, "grep", seed, chunk=1),
        "grepvi ADVI": grepvi_step(model, get_estimator("advi", num_elbo_samples=0), seed),
        "grepvi ADVI (+20 ELBO draws)": grepvi_step(model, "advi", seed),
    }
    for peer in peers:
        try:
            module = __import__(f"benchmarks.peers.{peer}_def", fromlist=["make_step"])
            contenders[peer.capitalize().replace("Numpyro", "NumPyro")] = module.make_step(
                data, LAYER_SIZES, seed
            )
        except ImportError as error:
            print(f"skipping {peer}: {error} (pip install -e '.[peers]')", file=sys.stderr)
    return contenders


def floor_contenders(data, seed=0):
    """The parts of one G-REP iteration of the DEF, each a jitted blocking call."""
    num_observations, num_dimensions = data.shape
    k1 = LAYER_SIZES[0]
    sizes = [
        num_observations * k + k * d
        for k, d in zip(LAYER_SIZES, (num_dimensions,) + LAYER_SIZES[:-1], strict=True)
    ]
    num_latents = sum(sizes)  # 463,800 at the Olivetti size
    rng = np.random.default_rng(seed)
    z1 = jnp.asarray(rng.gamma(1.0, 1.0, (num_observations, k1)), jnp.float32)
    w0 = jnp.asarray(rng.gamma(1.0, 1.0, (k1, num_dimensions)), jnp.float32)
    x = jnp.asarray(data, jnp.float32)
    alpha = jnp.asarray(np.exp(rng.uniform(np.log(0.05), np.log(5.0), num_latents)), jnp.float32)

    @jax.jit
    def matmuls(z1, w0, x):
        rate = z1 @ w0
        cotangent = x / rate - 1.0  # not timed separately: the elementwise part has it
        return rate, cotangent @ w0.T, z1.T @ cotangent

    @jax.jit
    def draws(key, alpha):
        return log_gamma(key, alpha)

    @jax.jit
    def polygammas(alpha):
        return (
            numerics.digamma(alpha),
            numerics.trigamma(alpha),
            numerics.tetragamma(alpha),
            numerics.gammaln(alpha),
        )

    @jax.jit
    def elementwise(rate, x, alpha, eps):
        likelihood = jnp.sum(x * jnp.log(rate) - rate)
        cotangent = x / rate - 1.0
        z = jnp.exp(eps * alpha + 0.5 * alpha)
        per_latent = alpha * eps + jnp.log(alpha) - z + eps * z * alpha
        return likelihood, cotangent, per_latent

    rate = matmuls(z1, w0, x)[0]
    eps = jnp.asarray(rng.standard_normal(num_latents), jnp.float32)
    counter = [0]

    def key():
        counter[0] += 1
        return jax.random.key(counter[0])

    return {
        "floor: 3 matmuls 320x100x4096": lambda: jax.block_until_ready(matmuls(z1, w0, x)),
        f"floor: {num_latents:,} log-gamma draws": lambda: jax.block_until_ready(draws(key(), alpha)),
        "floor: psi, psi_1, psi_2, lgamma": lambda: jax.block_until_ready(polygammas(alpha)),
        "floor: elementwise (N x D and latents)": lambda: jax.block_until_ready(
            elementwise(rate, x, alpha, eps)
        ),
    }


def mf_contenders(directory, seed=0):
    """The beta-gamma MF (K=100) at the MNIST and Omniglot sizes: G-REP and ADVI."""
    from grepvi.models import beta_gamma_mf

    rng = np.random.default_rng(seed)
    sets = {}
    for name, shape, loader in (
        ("MNIST 5000x784", (5000, 784), "mnist"),
        ("Omniglot 4425x11025", (4425, 11025), "omniglot"),
    ):
        data = None
        if directory is not None:
            try:
                from grepvi.data import load_dataset

                data = np.asarray(load_dataset(loader, directory).train)[: shape[0]]
            except Exception as error:  # noqa: BLE001
                print(f"{loader} not loaded ({error}); using Bernoulli(0.2) data", file=sys.stderr)
        if data is None or data.shape != shape:
            data = (rng.random(shape) < 0.2).astype(np.float32)
        model = beta_gamma_mf(data, 100)
        sets[name] = {
            f"{name}: grepvi G-REP": grepvi_step(model, "grep", seed),
            f"{name}: grepvi ADVI": grepvi_step(model, get_estimator("advi", num_elbo_samples=0), seed),
        }
    return sets


def time_interleaved(contenders, repeats):
    """Median seconds per iteration of each contender, the calls interleaved round by round.

    A contender with an attribute ``iterations`` runs that many iterations per call.
    """
    for run in contenders.values():  # compile and warm up
        run()
        run()
    seconds = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            seconds[name].append((time.perf_counter() - start) / getattr(run, "iterations", 1))
    return {name: statistics.median(values) for name, values in seconds.items()}


def print_table(title, medians, reference, rows, section):
    print(f"\n{title}")
    print(f"{'contender':44s} {'ms/iter':>10s} {'x ' + reference:>22s}")
    for name, value in medians.items():
        ratio = value / medians[reference]
        print(f"{name:44s} {value * 1e3:10.1f} {ratio:22.2f}")
        rows.append({"section": section, "contender": name, "median_ms": value * 1e3, "ratio": ratio})


def run_minibatch(args, directory, rows):
    from grepvi.inference.minibatch import minibatch_fit_steps
    from grepvi.models import beta_gamma_mf

    data = None
    if directory is not None:
        try:
            from grepvi.data import load_dataset

            omniglot = load_dataset("omniglot", directory, alphabets="all")
            data = np.concatenate([omniglot.train, omniglot.test]).astype(np.float32)
        except Exception as error:  # noqa: BLE001
            print(f"omniglot not loaded ({error}); using Bernoulli(0.2) data", file=sys.stderr)
    if data is None:
        data = (np.random.default_rng(args.seed).random((32460, 11025)) < 0.2).astype(np.float32)
    seconds, compile_seconds = minibatch_fit_steps(
        beta_gamma_mf, data, {"num_factors": 100}, args.batch_size, args.minibatch_steps, args.seed
    )
    median = statistics.median(seconds)
    steps_per_epoch = data.shape[0] / args.batch_size
    print(f"\nminibatch G-REP, beta-gamma MF K=100, full Omniglot {data.shape[0]}x{data.shape[1]}")
    print(f"batch {args.batch_size}: compile+first step {compile_seconds:.1f} s")
    print(f"median step {median:.3f} s over {len(seconds)} steps; epoch = {steps_per_epoch:.1f} steps")
    print(f"time per epoch (extrapolated from the measured steps): {median * steps_per_epoch:.1f} s")
    rows.append(
        {
            "section": "minibatch",
            "contender": f"omniglot full batch={args.batch_size} step",
            "median_ms": median * 1e3,
            "ratio": float("nan"),
        }
    )
    rows.append(
        {
            "section": "minibatch",
            "contender": "omniglot full epoch (extrapolated)",
            "median_ms": median * steps_per_epoch * 1e3,
            "ratio": float("nan"),
        }
    )


def main(args):
    sections = [s for s in args.sections.split(",") if s]
    directory = data_dir(args.data_dir)
    rows = []
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}: {len(jax.devices())} device(s)")
    if "def" in sections:
        data, source = olivetti_or_poisson(directory, args.seed)
        if args.grep_only:
            from grepvi.models import sparse_gamma_def

            contenders = {"grepvi G-REP": grepvi_step(sparse_gamma_def(data, LAYER_SIZES), "grep", args.seed)}
        else:
            contenders = def_contenders(data, [p for p in args.peers.split(",") if p], args.seed)
            contenders.update(floor_contenders(data, args.seed))
        medians = time_interleaved(contenders, args.repeats)
        parts = [name for name in medians if name.startswith("floor:")]
        if parts:
            medians["floor (sum of parts)"] = sum(medians[name] for name in parts)
        print_table(
            f"sparse gamma DEF {data.shape[0]}x{data.shape[1]}, layers {LAYER_SIZES}, {source}, "
            f"median of {args.repeats} interleaved rounds",
            medians,
            "grepvi G-REP",
            rows,
            "def",
        )
        if parts:
            floor = medians["floor (sum of parts)"]
            print(f"grepvi G-REP / floor = {medians['grepvi G-REP'] / floor:.2f}")
    if "mf" in sections:
        for name, contenders in mf_contenders(directory, args.seed).items():
            medians = time_interleaved(contenders, args.mf_repeats)
            print_table(
                f"beta-gamma MF K=100, {name}, median of {args.mf_repeats}",
                medians,
                f"{name}: grepvi G-REP",
                rows,
                "mf",
            )
    if "minibatch" in sections:
        run_minibatch(args, directory, rows)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of this process: {peak:.0f} MiB")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, ["section", "contender", "median_ms", "ratio"])
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main(parse_args())

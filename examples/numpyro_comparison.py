"""A NumPyro model fitted by grepvi (G-REP, defaults) and by NumPyro's own SVI, same data, same clock.

Models (``--model``): ``poisson`` (a gamma-Poisson matrix factorization, as in NumPyro's
examples: positive latents), ``def`` (the paper's sparse gamma DEF) and ``mf`` (the paper's
beta-gamma MF), written as ordinary NumPyro models (:mod:`grepvi.interop.numpyro_examples`), on data
simulated from the model (``poisson``) or the paper's data sets (``def``: Olivetti faces,
``mf``: binarized MNIST) when ``--data-dir``/``GREPVI_DATA_DIR`` has them.

Contenders, each for ``--seconds`` of wall time (compilation included):

* grepvi: ``from_numpyro(model, x).fit(time_budget=...)``: G-REP with the blankets read off
  the plates, the default procedure (no step size to choose);
* NumPyro SVI, ``AutoNormal`` guide (NumPyro's default mean-field guide), ``Trace_ELBO``,
  Adam(0.01);
* NumPyro SVI, a mean-field guide of NumPyro's own gamma / beta distributions (implicit
  reparameterization gradients), ``Trace_ELBO``, Adam(0.01).

The score: the ELBO of each fitted ``q`` by the same Monte Carlo estimator (``--eval-draws``
draws of ``log p(x, z) - log q(z)``), higher is better.

Usage::

    python examples/numpyro_comparison.py --model poisson --seconds 30
"""

import argparse
import contextlib
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro import handlers  # noqa: E402
from numpyro.infer import SVI, Trace_ELBO  # noqa: E402
from numpyro.infer.autoguide import AutoNormal  # noqa: E402

from grepvi import evaluation  # noqa: E402
from grepvi.interop.numpyro_examples import (  # noqa: E402
    beta_gamma_mf_model,
    poisson_factorization_model,
    sparse_gamma_def_model,
)
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402


def load(model_name, data_dir, seed):
    if model_name == "poisson":
        model = lambda x: poisson_factorization_model(x, num_factors=5)  # noqa: E731
        prior = handlers.trace(handlers.seed(model, seed)).get_trace(jnp.zeros((200, 100)))
        return model, np.asarray(prior["counts"]["value"], np.float32), "simulated 200 x 100, K = 5"
    from grepvi.data import load_dataset

    if model_name == "def":
        x = load_dataset("olivetti", data_dir).train.astype(np.float32)
        return lambda x: sparse_gamma_def_model(x), x, "Olivetti 320 x 4096, layers 100/40/15"  # noqa: E731
    x = load_dataset("mnist", data_dir).train.astype(np.float32)
    return lambda x: beta_gamma_mf_model(x, 100), x, f"binarized MNIST {x.shape[0]} x {x.shape[1]}, K = 100"  # noqa: E731


def mean_field_guide(model, x):
    """A guide of NumPyro's own distributions: Gamma for positive sites, Beta for unit ones."""
    sites = handlers.trace(handlers.seed(model, 0)).get_trace(x)
    latent = {n: s for n, s in sites.items() if s["type"] == "sample" and not s["is_observed"]}

    def guide(x):
        for name, site in latent.items():
            shape = jnp.shape(site["value"])
            a = numpyro.param(f"{name}_a", jnp.ones(shape), constraint=dist.constraints.positive)
            b = numpyro.param(f"{name}_b", jnp.ones(shape), constraint=dist.constraints.positive)
            family = dist.Gamma if site["fn"].support == dist.constraints.positive else dist.Beta
            with contextlib.ExitStack() as plates:  # the site's plates, as in the model
                for frame in site["cond_indep_stack"]:
                    plates.enter_context(numpyro.plate(frame.name, frame.size, dim=frame.dim))
                numpyro.sample(name, family(a, b).to_event(site["fn"].event_dim))

    return guide


def run_svi(model, guide, x, seconds, seed, chunk=100):
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    start = time.perf_counter()
    state = svi.init(jax.random.key(seed), x)

    @jax.jit
    def steps(state):
        return jax.lax.fori_loop(0, chunk, lambda i, s: svi.update(s, x)[0], state)

    iterations = 0
    while time.perf_counter() - start < seconds:
        state = jax.block_until_ready(steps(state))
        iterations += chunk
    return svi.get_params(state), iterations, time.perf_counter() - start


def numpyro_elbo(model, guide, params, x, draws, seed):
    """Mean of ``draws`` one-draw ELBO estimates (one at a time: memory of one draw)."""
    one = jax.jit(lambda key: Trace_ELBO().loss(key, params, model, guide, x))
    keys = jax.random.split(jax.random.key(seed), draws)
    return -float(np.mean([float(one(key)) for key in keys]))


def grepvi_elbo(params, target, data, draws, seed):
    """The same for grepvi's q (``grepvi.diagnostics.evaluation.elbo_estimate`` with one draw each)."""
    one = jax.jit(lambda key, params, data: evaluation.elbo_estimate(key, params, target, 1, data))
    keys = jax.random.split(jax.random.key(seed), draws)
    return float(np.mean([float(one(key, params, data)) for key in keys]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("poisson", "def", "mf"), default="poisson")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--eval-draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    args = parser.parse_args(argv)
    model, x, description = load(args.model, args.data_dir, args.seed)
    rows = []

    start = time.perf_counter()
    adapted = from_numpyro(model, x)
    result = adapted.fit(time_budget=args.seconds, seed=args.seed, progress=False)
    elapsed = time.perf_counter() - start
    target = adapted.target(result.families)
    elbo = grepvi_elbo(result.params, target, adapted.data, args.eval_draws, 1)
    rows.append(("grepvi G-REP (defaults)", elbo, result.convergence.num_iterations, elapsed))

    for label, guide in (
        ("NumPyro SVI, AutoNormal", AutoNormal(model)),
        ("NumPyro SVI, gamma/beta guide", mean_field_guide(model, x)),
    ):
        params, iterations, elapsed = run_svi(model, guide, x, args.seconds, args.seed)
        rows.append((label, numpyro_elbo(model, guide, params, x, args.eval_draws, 1), iterations, elapsed))

    print(f"{args.model}: {description}; {args.seconds:g} s each; ELBO by {args.eval_draws} draws of q")
    print(f"{'contender':34s} {'ELBO':>14s} {'iterations':>11s} {'seconds':>8s}")
    for label, elbo, iterations, elapsed in rows:
        print(f"{label:34s} {elbo:14.6g} {iterations:11d} {elapsed:8.1f}")
    return rows


if __name__ == "__main__":
    main()

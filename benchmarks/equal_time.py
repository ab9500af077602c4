"""Equal wall time on the paper's models: grepvi's defaults against NumPyro SVI.

One command; for each model and each budget ``T`` every contender runs in a fresh Python
process (imports outside the clock; model construction, tracing, XLA compilation and the fit
inside it, with an empty compilation cache)::

    python benchmarks/equal_time.py --models def mf --budgets 30 120

Models: ``def`` (the sparse gamma DEF, layers 100/40/15, on the 320 Olivetti training faces)
and ``mf`` (the beta-gamma MF, K = 100, on the 5,000 binarized MNIST training images), from
``--data-dir`` (default ``$GREPVI_DATA_DIR``).

Contenders:

* ``grepvi``: ``grepvi.fit(model, time_budget=T)`` on the built-in model
  (:func:`grepvi.models.sparse_gamma_def`, :func:`grepvi.models.beta_gamma_mf`): the default
  procedure, no step size, no optimizer.
* ``svi``: NumPyro SVI, ``AutoNormal`` guide, ``Adam(0.01)``, ``Trace_ELBO``, on the same model
  written in NumPyro (:mod:`grepvi.interop.numpyro_examples`); steps in jitted chunks, the
  next chunk run only while it fits in ``T`` (timed by the previous chunk).

The score, after the clock: one estimator for every fitted ``q``, ``E_q[log p(x, z) - log
q(z)]`` over ``--draws`` draws (default 200), computed in float64 and in log space: each draw
is ``u = log z`` (``logit z`` for the MF's ``z``) straight from ``q`` (grepvi's gamma/beta in
log space; AutoNormal's ``loc + scale eps``), ``log p`` is the built-in model's log-space joint
at ``u`` and ``log q(z)`` the density of ``z`` (AutoNormal's normal density minus ``log |dz/du|``).
Gamma shapes reach 1e-6, whose draws are 0 even in float64: the value-space ``Trace_ELBO``
cannot score them. The table gives each ELBO with its Monte Carlo standard error, the steps
run, the wall time used and grepvi's ELBO minus SVI's (and their ratio).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONTENDERS = ("grepvi", "svi")
MODELS = ("def", "mf")


def _load(model_name, data_dir):
    import numpy as np

    from grepvi.data import load_dataset

    if model_name == "def":
        return load_dataset("olivetti", data_dir).train.astype(np.float32)
    return load_dataset("mnist", data_dir).train.astype(np.float32)


def _builtin(model_name, x):
    from grepvi.models import beta_gamma_mf, sparse_gamma_def

    if model_name == "def":
        return sparse_gamma_def(x, layer_sizes=(100, 40, 15))
    return beta_gamma_mf(x, num_factors=100)


def _numpyro_model(model_name):
    from grepvi.interop.numpyro_examples import beta_gamma_mf_model, sparse_gamma_def_model

    if model_name == "def":
        return lambda x: sparse_gamma_def_model(x, layer_sizes=(100, 40, 15))
    return lambda x: beta_gamma_mf_model(x, 100)


def run_grepvi(model_name, x, budget, seed):
    import jax

    import grepvi

    start = time.perf_counter()
    model = _builtin(model_name, x)
    result = grepvi.fit(model, time_budget=budget, seed=seed, progress=False)
    jax.block_until_ready(result.params)
    elapsed = time.perf_counter() - start
    convergence = result.convergence
    record = {
        "steps": int(convergence.num_iterations),
        "time": elapsed,
        "rule": convergence.direction,
        "trial_note": convergence.trial_note,
        "trial_elbos": {k: float(v) for k, v in dict(convergence.trial_elbos).items()},
        "reason": convergence.reason,
        "stages": int(convergence.num_stages),
        "climbs": int(convergence.climbs),
    }
    return ("grepvi", result), record


def run_svi(model_name, x, budget, seed, chunk=25):
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    start = time.perf_counter()
    model = _numpyro_model(model_name)
    x = jnp.asarray(x)
    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    state = svi.init(jax.random.key(seed), x)

    @jax.jit
    def steps(state):
        return jax.lax.fori_loop(0, chunk, lambda i, s: svi.update(s, x)[0], state)

    steps = steps.lower(state).compile()
    iterations, last = 0, 0.0
    while True:
        now = time.perf_counter() - start
        if iterations and now + last > budget:
            break
        t0 = time.perf_counter()
        state = jax.block_until_ready(steps(state))
        last = time.perf_counter() - t0
        iterations += chunk
    elapsed = time.perf_counter() - start
    params = {k: v for k, v in svi.get_params(state).items()}
    return ("svi", params), {"steps": iterations, "time": elapsed, "chunk_seconds": last}


def _draws_grepvi(result, key, draws):
    """``(u, log q)`` per draw of grepvi's ``q`` (float64, log space)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    families = result.families
    params = jax.tree_util.tree_map(lambda p: jnp.asarray(np.asarray(p, np.float64)), dict(result.params))
    names = sorted(families)

    @jax.jit
    def one(key):
        keys = jax.random.split(key, len(names))
        u, log_q = {}, 0.0
        for k, name in zip(keys, names, strict=True):
            value = families[name].sample_log_space(params[name], k)
            u[name] = value
            log_q = log_q + jnp.sum(families[name].log_prob_log_space(params[name], value))
        return u, log_q

    return one, names


def _draws_autonormal(params, supports, key, draws):
    import jax
    import jax.numpy as jnp
    import numpy as np

    names = sorted(supports)
    loc = {n: jnp.asarray(np.asarray(params[f"{n}_auto_loc"], np.float64)) for n in names}
    scale = {n: jnp.asarray(np.asarray(params[f"{n}_auto_scale"], np.float64)) for n in names}

    @jax.jit
    def one(key):
        keys = jax.random.split(key, len(names))
        u, log_q = {}, 0.0
        for k, name in zip(keys, names, strict=True):
            eps = jax.random.normal(k, loc[name].shape, jnp.float64)
            value = loc[name] + scale[name] * eps
            log_normal = -0.5 * eps**2 - jnp.log(scale[name]) - 0.5 * np.log(2 * np.pi)
            if supports[name] == "unit_interval":  # z = sigmoid(u)
                log_jacobian = -jax.nn.softplus(-value) - jax.nn.softplus(value)
            else:  # positive: z = exp(u)
                log_jacobian = value
            u[name] = value
            log_q = log_q + jnp.sum(log_normal - log_jacobian)
        return u, log_q

    return one, names


def shared_elbo(model_name, x, answer, draws, seed):
    """``(mean, standard error, median)`` of ``log p(x, z) - log q(z)`` over ``draws`` draws of
    ``q``, float64, log space (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    model = _builtin(model_name, np.asarray(x))
    data = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a, np.float64)), model.data)
    supports = {name: family.support for name, family in model.latents().items()}
    kind, value = answer
    if kind == "grepvi":
        one, _ = _draws_grepvi(value, None, draws)
    else:
        one, _ = _draws_autonormal(value, supports, None, draws)
    log_joint = jax.jit(model.joint.logdensity_fn)
    values = []
    for key in jax.random.split(jax.random.key(seed), draws):
        u, log_q = one(key)
        values.append(float(log_joint(u, data)) - float(log_q))
    values = np.asarray(values, np.float64)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size)), float(np.median(values))


def _worker(contender, model_name, budget, out, seed, draws, data_dir):
    x = _load(model_name, data_dir)
    if contender == "grepvi":
        answer, record = run_grepvi(model_name, x, budget, seed)
    else:
        answer, record = run_svi(model_name, x, budget, seed)
    record.update(contender=contender, model=model_name, budget=budget)
    t0 = time.perf_counter()
    score = shared_elbo(model_name, x, answer, draws, seed + 1)
    record["elbo"], record["elbo_se"], record["elbo_median"] = score
    record["score_seconds"] = time.perf_counter() - t0
    Path(out).write_text(json.dumps(record))


def run_one(contender, model_name, budget, seed=0, draws=200, data_dir=None):
    """One contender in a fresh process with an empty compilation cache; its record."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        env = {
            **os.environ,
            "GREPVI_COMPILATION_CACHE": str(Path(folder) / "jax-cache"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        if data_dir:
            env["GREPVI_DATA_DIR"] = str(data_dir)
        command = [sys.executable, __file__, "--worker", contender, model_name, repr(budget), str(out)]
        command += ["--seed", str(seed), "--draws", str(draws)]
        completed = subprocess.run(command, env=env, capture_output=True, text=True)
        if completed.returncode != 0:
            print(completed.stderr[-3000:], file=sys.stderr)
            failed = {"contender": contender, "model": model_name, "budget": budget}
            return {**failed, "error": completed.returncode}
        return json.loads(out.read_text())


def print_table(records):
    print(
        f"{'model':5s} {'T s':>5s} | {'grepvi ELBO':>20s} {'steps':>6s} {'s':>6s} | "
        f"{'SVI ELBO':>20s} {'steps':>6s} {'s':>6s} | {'grepvi-SVI':>10s} {'ratio':>6s}  grepvi rule"
    )
    keyed = {(r["model"], r["budget"], r["contender"]): r for r in records}
    for model, budget in sorted({(r["model"], r["budget"]) for r in records}):
        cells = []
        for contender in CONTENDERS:
            r = keyed.get((model, budget, contender))
            if r is None or "error" in r:
                cells.append(f"{'failed' if r else '-':>20s} {'':>6s} {'':>6s}")
            else:
                elbo = f"{r['elbo']:.4g} +- {r['elbo_se']:.2g}"
                cells.append(f"{elbo:>20s} {r['steps']:>6d} {r['time']:>6.1f}")
        g, s = keyed.get((model, budget, "grepvi")), keyed.get((model, budget, "svi"))
        diff = ratio = rule = ""
        if g and s and "error" not in g and "error" not in s:
            diff, ratio = f"{g['elbo'] - s['elbo']:.3g}", f"{g['elbo'] / s['elbo']:.3f}"
        if g and "error" not in g:
            rule = f"{g['rule']} ({g['reason']})"
        print(f"{model:5s} {budget:>5g} | {cells[0]} | {cells[1]} | {diff:>10s} {ratio:>6s}  {rule}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--budgets", nargs="+", type=float, default=[30.0, 120.0, 600.0])
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--draws", type=int, default=200, help="draws of q for the shared ELBO estimator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    parser.add_argument("--json", help="append every record (one JSON line each) to this file")
    worker_args = ("CONTENDER", "MODEL", "BUDGET", "OUT")
    parser.add_argument("--worker", nargs=4, metavar=worker_args, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        contender, model, budget, out = args.worker
        _worker(contender, model, float(budget), out, args.seed, args.draws, args.data_dir)
        return None
    records = []
    for model in args.models:
        for budget in args.budgets:
            for contender in args.contenders:
                record = run_one(contender, model, budget, args.seed, args.draws, args.data_dir)
                records.append(record)
                print(json.dumps(record), flush=True)
                if args.json:
                    with open(args.json, "a") as handle:
                        handle.write(json.dumps(record) + "\n")
    print()
    print_table(records)
    return records


if __name__ == "__main__":
    main()

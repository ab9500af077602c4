"""The time of one step on the paper's models: the default procedure's window, its parts, and NumPyro.

One process, every contender compiled first, then ``--rounds`` rounds calling each in turn
(interleaved, so that load from other jobs falls on all alike); the median milliseconds per
step (wall time, and the CPU time of all the process's threads, which load from other jobs
disturbs less) and the compile time of each::

    python benchmarks/step_cost.py --model def --steps 20 --rounds 6

Contenders:

* ``fit window``: the compiled window of :func:`grepvi.fit`'s default procedure
  (``fitting.setup``: the rule switch, the running mean, the per-step outputs), rule
  ``adam-0.1``;
* ``G-REP + adam, scan``: :func:`grepvi.inference.state.step` with ``optax.adam(0.1)`` in a
  jitted ``lax.scan`` (no switch, no mean, no buffers);
* ``G-REP + rule switch, scan``: the same with the default procedure's optimizer
  (:func:`grepvi.inference.rules.switch` of the natural-gradient rule and Adam; Adam 0.1 selected);
* ``ADVI + adam, scan``: the same with grepvi's ADVI estimator (reparameterization only, no
  G-REP correction);
* ``NumPyro SVI AutoNormal``: ``svi.update`` in a jitted ``fori_loop``.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("def", "mf"), default="def")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", nargs="*", help="contender names (substrings) to run")
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpyro
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    from grepvi.data import load_dataset
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting, rules
    from grepvi.inference.state import init, step
    from grepvi.interop.numpyro_examples import beta_gamma_mf_model, sparse_gamma_def_model
    from grepvi.models import beta_gamma_mf, sparse_gamma_def

    x = load_dataset("olivetti" if args.model == "def" else "mnist", args.data_dir).train.astype(np.float32)
    model = sparse_gamma_def(x) if args.model == "def" else beta_gamma_mf(x, num_factors=100)
    data = jax.tree_util.tree_map(jnp.asarray, model.data)
    n = args.steps
    makers = {}

    def fit_window():
        estimator = get_estimator("grep")
        target = model.target()
        target = target._replace(families=estimator.adapt_families(target.families))
        prepared = fitting.setup(target, estimator, data=data, time_budget=1e9, model=model, check=False)
        index = [c.label for c in prepared.plan.candidates].index("adam-0.1")
        holder = [prepared.plan.select(prepared.initial.loop, index, 0.1)]
        prepared.window.compile(holder[0], data)

        def run():
            holder[0], _, out = prepared.window(holder[0], data, n)
            jax.block_until_ready(out["elbo"])

        return run

    def scan(estimator_name, switch=False, **options):
        def make():
            estimator = get_estimator(estimator_name, **options)
            target = model.target()
            target = target._replace(families=estimator.adapt_families(target.families))
            optimizer = optax.adam(0.1)
            if switch == "adam rule":  # the procedure's Adam rule alone (positive parameters in log scale)
                optimizer = rules.switch([rules.adam_rule(target.families)], 0, 0.1)
            elif switch:  # the default procedure's optimizer, rule adam-0.1 selected
                optimizer, candidates = rules.default_candidates(target.families, 0.1, 0.5, 0.1)
                adam = next(c for c in candidates if c.label == "adam-0.1")
                optimizer = rules.switch(
                    [rules.natural_rule(target.families, 0.5), rules.adam_rule(target.families)],
                    adam.index,
                    0.1,
                )

            def one(s, d):
                return step(s, target, estimator, optimizer, d)

            chunk = jax.jit(lambda s, d: jax.lax.scan(lambda s, _: one(s, d), s, None, length=n))
            holder = [init(jax.random.key(0), target, optimizer)]
            chunk = chunk.lower(holder[0], data).compile()

            def run():
                holder[0], info = chunk(holder[0], data)
                jax.block_until_ready(info.elbo)

            return run

        return make

    def svi():
        if args.model == "def":
            numpyro_model = lambda x: sparse_gamma_def_model(x)  # noqa: E731
        else:
            numpyro_model = lambda x: beta_gamma_mf_model(x, 100)  # noqa: E731
        xs = jnp.asarray(x)
        guide = AutoNormal(numpyro_model)
        solver = SVI(numpyro_model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
        holder = [solver.init(jax.random.key(0), xs)]
        chunk = jax.jit(lambda s: jax.lax.fori_loop(0, n, lambda i, s: solver.update(s, xs)[0], s))
        chunk = chunk.lower(holder[0]).compile()

        def run():
            holder[0] = jax.block_until_ready(chunk(holder[0]))

        return run

    makers["fit window (adam-0.1)"] = fit_window
    makers["G-REP + adam, scan"] = scan("grep")
    makers["G-REP + rule switch, scan"] = scan("grep", switch=True)
    makers["G-REP + adam rule alone, scan"] = scan("grep", switch="adam rule")
    makers["G-REP (no baseline) + adam, scan"] = scan("grep", baseline=False)
    makers["ADVI + adam, scan"] = scan("advi", num_elbo_samples=0)
    makers["NumPyro SVI AutoNormal"] = svi
    contenders, compile_seconds = {}, {}
    for name, make in makers.items():
        if args.only and not any(s in name for s in args.only):
            continue
        t0 = time.perf_counter()
        contenders[name] = make()
        contenders[name]()  # first call
        compile_seconds[name] = time.perf_counter() - t0
        print(f"{name}: built and compiled in {compile_seconds[name]:.1f} s", flush=True)
    times = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run()
            times[name].append((time.perf_counter() - t0) / n)
            cpu[name].append((time.process_time() - c0) / n)
    print(f"\n{args.model}: median ms per step, {args.rounds} rounds of {n} steps (wall; CPU of all threads)")
    for name, values in times.items():
        wall, busy = 1e3 * statistics.median(values), 1e3 * statistics.median(cpu[name])
        print(f"  {name:32s} {wall:8.2f} ms wall {busy:8.2f} ms CPU  (compile {compile_seconds[name]:.1f} s)")


if __name__ == "__main__":
    main()

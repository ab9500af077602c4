"""Compile time and step time of the default window with and without the draws' fusion boundary.

:mod:`grepvi.fusion_boundary` computes a small model's standardized draws (and the gamma
sampler's proposal normals) once into memory instead of inside each consumer. This compiles
the default procedure's window (the natural-gradient rule selected, 100 steps) of textbook
models in fresh processes, alternating ``on`` (the library) and ``off`` (the boundary
patched out of :func:`grepvi.estimators.base.sample_standardized` and the sampler), and
prints the medians over rounds with their ratios::

    python benchmarks/fusion_boundary.py --models pumps eight_schools sum_ridge --rounds 3
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODELS = (
    "pumps", "eight_schools", "rat_tumors", "mendel", "logistic", "horseshoe", "sum_ridge", "irt_2pl",
)  # fmt: skip


def _worker(model_name: str, variant: str) -> None:
    import re
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    import grepvi.estimators.base
    import grepvi.sampling
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting
    from grepvi.inference.compilation_cache import step_compiler_options
    from grepvi.interop.numpyro_model import from_numpyro

    if variant == "off":
        grepvi.estimators.base.computed_once = lambda tree, *args, **kwargs: tree
        grepvi.sampling.computed_once = lambda tree, *args, **kwargs: tree
    entry = ALL_MODELS[model_name]
    adapted = from_numpyro(entry.model, *[jnp.asarray(a) for a in entry.args])
    estimator = get_estimator("grep")
    target = adapted.target()
    target = target._replace(families=estimator.adapt_families(target.families))
    prepared = fitting.setup(target, estimator, data=adapted.data)
    window = prepared.window
    labels = [c.label for c in prepared.plan.candidates]
    loop = prepared.plan.select(prepared.initial.loop, labels.index("natural"), 0.1)
    lowered = window.jitted.lower(loop, adapted.data, np.int32(window.length))
    start = time.perf_counter()
    compiled = lowered.compile(step_compiler_options(fitting.latent_elements(target.families)))
    compile_seconds = time.perf_counter() - start
    text = compiled.as_text()
    out = jax.block_until_ready(compiled(loop, adapted.data, np.int32(window.length)))
    times = []
    for _ in range(7):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(out[0], adapted.data, np.int32(window.length)))
        times.append((time.perf_counter() - start) / window.length)
    record = {
        "compile": compile_seconds,
        "step_ms": 1e3 * float(np.median(times)),
        "erf_inv_lines": len(re.findall(r"\n[^\n]*erf_inv[^\n]*", text)),
    }
    print(json.dumps(record))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(*args.worker)
        return
    header = f"{'compile s off/on':>17s} {'ratio':>6s} {'step ms off/on':>16s} {'ratio':>6s}"
    print(f"{'model':22s} {header}  erf_inv lines off/on")
    for model in args.models:
        records = {"off": [], "on": []}
        for _ in range(args.rounds):
            for variant in ("off", "on"):
                completed = subprocess.run(
                    [sys.executable, __file__, "--worker", model, variant], capture_output=True, text=True
                )
                if completed.returncode != 0:
                    print(completed.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(completed.returncode)
                records[variant].append(json.loads(completed.stdout.strip().splitlines()[-1]))
        med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in records.items()}
        off, on = med["off"], med["on"]
        print(
            f"{model:22s} {off['compile']:8.2f}/{on['compile']:<8.2f} {on['compile'] / off['compile']:6.2f} "
            f"{off['step_ms']:7.3f}/{on['step_ms']:<8.3f} {on['step_ms'] / off['step_ms']:6.2f}  "
            f"{off['erf_inv_lines']:.0f}/{on['erf_inv_lines']:.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

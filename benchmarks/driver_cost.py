"""Per-iteration cost of the one driver against an older checkout's loop, on the Olivetti DEF.

    python -m benchmarks.driver_cost --baseline /path/to/old/checkout [--steps 200 --repeats 3]

Each contender runs in its own process (a fresh start), alternately, ``--repeats`` times: G-REP
with the paper's Eq. 9 (eta 1) for ``--steps`` iterations after compilation, in windows of 100.
The new code runs ``grepvi.inference.driver.run`` (a ``fori_loop`` window of dynamic length); an older
checkout runs whatever its ``grepvi.loop.run_chunks`` is (a ``lax.scan`` chunk). Prints seconds
per iteration of each and the ratio new / old (timings on shared machines drift; the ratio of
interleaved runs holds better).
"""

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import jax, numpy as np
import grepvi
from grepvi.data import load_dataset
from grepvi.models import sparse_gamma_def

steps = int(sys.argv[1])
x = load_dataset("olivetti", __import__("os").environ.get("GREPVI_DATA_DIR")).train
model = sparse_gamma_def(x, layer_sizes=(100, 40, 15))
target, estimator = model.target(), grepvi.get_estimator("grep")
optimizer = grepvi.advi_stepsize(1.0)
state = grepvi.init(jax.random.key(0), target, optimizer)
try:
    from grepvi.inference import driver, fitting  # the one driver
    setup = fitting.setup(target, estimator, data=model.data, step_size=1.0, chunk_size=100, max_steps=steps)
    driver.run(setup.window, setup.initial, setup.plan, data=model.data, max_steps=100)  # compile + warm
    start = time.perf_counter()
    driver.run(setup.window, setup.initial, setup.plan, data=model.data, max_steps=steps)
    seconds = time.perf_counter() - start
    kind = "driver"
except ImportError:
    from grepvi.loop import run_chunks  # an older checkout
    run_chunks(state, target, estimator, optimizer, 100, 100, data=model.data)
    start = time.perf_counter()
    run_chunks(state, target, estimator, optimizer, steps, 100, data=model.data)
    seconds = time.perf_counter() - start
    kind = "run_chunks"
print(json.dumps({"kind": kind, "seconds_per_iteration": seconds / steps}))
"""


def _one(path: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=path, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="an older grepvi checkout (its repository root)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    new, old = [], []
    for _ in range(args.repeats):
        new.append(_one(here, args.steps)["seconds_per_iteration"])
        old.append(_one(args.baseline, args.steps)["seconds_per_iteration"])
    median = lambda v: sorted(v)[len(v) // 2]
    print(f"new driver   {median(new) * 1e3:8.2f} ms/iteration  (runs: {[round(v * 1e3, 2) for v in new]})")
    print(f"old loop     {median(old) * 1e3:8.2f} ms/iteration  (runs: {[round(v * 1e3, 2) for v in old]})")
    print(f"ratio new / old: {median(new) / median(old):.3f}  ({time.strftime('%Y-%m-%d %H:%M')})")


if __name__ == "__main__":
    main()

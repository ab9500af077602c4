"""The default fit with the window's Threefry hashes lowered unrolled, against JAX's CPU default.

JAX lowers its Threefry hash on CPU as a rolled loop of 5 trips; ``grepvi.inference.driver``
lowers its window with the rounds unrolled (:func:`grepvi.threefry.unrolled_lowering`: the same
bits). Each (model, lowering) pair runs ``from_numpyro(model, *data).fit()`` with the defaults
in a fresh process with the compilation cache off, the lowerings alternating, ``--rounds``
times; the table gives the medians of the wall time (adapter and fit, compilation included),
the window's compile time and the steps' time, and the ratio unrolled / rolled. The two
lowerings give the same draws, so the same iterations and ELBO (printed to check)::

    python benchmarks/threefry_lowering.py --models dugongs pumps horseshoe salmonella --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import contextlib, json, sys, time, warnings
sys.path.insert(0, sys.argv[3])
import jax
import numpy as np
from textbook_models import ALL_MODELS
from grepvi import threefry
from grepvi.inference import driver, fitting
from grepvi.interop.numpyro_model import from_numpyro

if sys.argv[2] == "rolled":
    threefry.unrolled_lowering = contextlib.nullcontext
seconds = {"compile": 0.0, "windows": 0.0}
make_window = driver.make_window


def timed_make_window(*args, **kwargs):
    window = make_window(*args, **kwargs)

    def run(state, data, active):
        start = time.perf_counter()
        out = jax.block_until_ready(window(state, data, active))
        seconds["windows"] += time.perf_counter() - start
        return out

    def compile_ahead(state, data):
        start = time.perf_counter()
        out = window.compile(state, data)
        seconds["compile"] += time.perf_counter() - start
        return out

    run.length, run.compile = window.length, compile_ahead
    run.jitted, run.num_compiled = window.jitted, window.num_compiled
    return run


fitting.driver.make_window = timed_make_window
entry = ALL_MODELS[sys.argv[1]]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    result = from_numpyro(entry.model, *entry.args).fit(progress=False)
    wall = time.perf_counter() - start
print(json.dumps({"wall": wall, **seconds, "iterations": int(result.convergence.num_iterations),
                  "elbo": float(np.median(result.trace.elbo[-100:]))}))
"""


def _one(model: str, lowering: str) -> dict:
    environment = dict(os.environ, GREPVI_COMPILATION_CACHE="0")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, model, lowering, str(HERE)],
        capture_output=True,
        text=True,
        env=environment,
    )
    if done.returncode:
        raise SystemExit(f"{model} {lowering} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["dugongs", "pumps", "horseshoe", "salmonella"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    header = (
        f"{'model':<22} {'wall rolled':>11} {'unrolled':>9} {'ratio':>6} {'compile r/u':>12} "
        f"{'steps s r/u':>12} {'iterations r/u':>15}"
    )
    print(header)
    for model in args.models:
        rows = {"rolled": [], "unrolled": []}
        for _ in range(args.rounds):
            for lowering in ("rolled", "unrolled"):
                rows[lowering].append(_one(model, lowering))
        med = {
            lowering: {key: statistics.median(r[key] for r in runs) for key in ("wall", "compile", "windows")}
            for lowering, runs in rows.items()
        }
        its = (rows["rolled"][0]["iterations"], rows["unrolled"][0]["iterations"])
        print(
            f"{model:<22} {med['rolled']['wall']:>11.2f} {med['unrolled']['wall']:>9.2f} "
            f"{med['unrolled']['wall'] / med['rolled']['wall']:>6.2f} "
            f"{med['rolled']['compile']:>5.2f}/{med['unrolled']['compile']:<6.2f} "
            f"{med['rolled']['windows']:>5.2f}/{med['unrolled']['windows']:<6.2f} "
            f"{its[0]:>7}/{its[1]:<7}",
            flush=True,
        )
        if rows["rolled"][0]["elbo"] != rows["unrolled"][0]["elbo"] or its[0] != its[1]:
            print(f"  {model}: the two lowerings' fits differ: {rows['rolled'][0]} {rows['unrolled'][0]}")


if __name__ == "__main__":
    main()

"""Time per full-batch G-REP iteration of the paper's models, on whatever device JAX sees.

    python benchmarks/iteration_time.py                 # Olivetti DEF, MNIST MF, Omniglot MF
    python benchmarks/iteration_time.py --steps 300 --models omniglot-mf

Each model runs the one driver (:func:`grepvi.inference.driver.run`) with the paper's Eq. 9
schedule (eta 1, one draw, windows of 100 steps) for ``--steps`` iterations after one
compiling window; the compile time and the milliseconds per iteration are printed with the
device. The data come from ``$GREPVI_DATA_DIR`` (a model whose data set is missing is
skipped). Issue 21 sets a goal of 30 ms for the full-batch Omniglot iteration on a GPU.
"""

import argparse
import json
import os
import time

import jax

from grepvi.data import load_dataset
from grepvi.estimators import get_estimator
from grepvi.inference import driver, fitting
from grepvi.models import beta_gamma_mf, sparse_gamma_def

MODELS = {
    "olivetti-def": ("olivetti", lambda x: sparse_gamma_def(x, layer_sizes=(100, 40, 15))),
    "mnist-mf": ("mnist", lambda x: beta_gamma_mf(x, num_factors=100)),
    "omniglot-mf": ("omniglot", lambda x: beta_gamma_mf(x, num_factors=100)),
}


def time_model(name: str, steps: int, data_dir: str | None) -> dict:
    dataset, build = MODELS[name]
    try:
        x = load_dataset(dataset, data_dir).train
    except Exception as error:  # a missing data set: skipped, said why
        return {"model": name, "skipped": str(error)[:200]}
    model = build(x)
    target = model.target()
    setup = fitting.setup(
        target, get_estimator("grep"), data=model.data, step_size=1.0, chunk_size=100, max_steps=steps + 100
    )
    start = time.perf_counter()
    state = driver.run(setup.window, setup.initial, setup.plan, data=model.data, max_steps=100)
    jax.block_until_ready(jax.tree_util.tree_leaves(state))
    first = time.perf_counter() - start
    start = time.perf_counter()
    state = driver.run(setup.window, setup.initial, setup.plan, data=model.data, max_steps=steps)
    jax.block_until_ready(jax.tree_util.tree_leaves(state))
    seconds = time.perf_counter() - start
    return {
        "model": name,
        "rows": int(x.shape[0]),
        "columns": int(x.shape[1]),
        "first_window_s": round(first, 2),
        "ms_per_iteration": round(1e3 * seconds / steps, 3),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--data-dir", default=os.environ.get("GREPVI_DATA_DIR"))
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    print(f"jax {jax.__version__}, device {device.platform}: {device.device_kind}")
    for name in args.models:
        print(json.dumps(time_model(name, args.steps, args.data_dir)), flush=True)


if __name__ == "__main__":
    main()

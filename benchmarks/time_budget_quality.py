"""``fit(time_budget=T)`` on the textbook models: is a short run's answer as good as it says?

For each model and budget ``T`` two fits run, each in a fresh process with a fresh
compilation cache (compilation inside the budget): ``time_budget=T`` and ``time_budget=2T``.
Where the longer run converged (no ``NotConvergedWarning``), the distance between the two
answers is measured in the Fisher metric of ``q`` (posterior standard deviations, RMS over
latent elements, the unit of ``Convergence.accuracy``) and set against the accuracy the
short run reports (its tolerance where it converged). Issue 21: the short run's answer must
not be worse than the longer one's by more than the accuracy it reports.

    python benchmarks/time_budget_quality.py                      # T = 10 and 30 s
    python benchmarks/time_budget_quality.py --budgets 10 --models pumps mendel
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _worker(model_name: str, budget: float, out: str) -> None:
    import warnings

    import jax
    import numpy as np

    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    from grepvi.interop.numpyro_model import from_numpyro

    entry = ALL_MODELS[model_name]
    args = tuple(jax.numpy.asarray(a) for a in entry.args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = from_numpyro(entry.model, *args).fit(progress=False, time_budget=budget)
    c = result.convergence
    record = {
        "converged": bool(result.converged),
        "warned": any(type(w.message).__name__ == "NotConvergedWarning" for w in caught),
        "iterations": int(c.num_iterations),
        "accuracy": float(c.accuracy),
        "rule": c.direction,
        "params": jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64).tolist(), result.params),
    }
    Path(out).write_text(json.dumps(record))


def _run(model, budget):
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        env = {**os.environ, "GREPVI_COMPILATION_CACHE": str(Path(folder) / "jax-cache")}
        command = [sys.executable, __file__, "--worker", model, str(budget), str(out)]
        completed = subprocess.run(command, env=env, capture_output=True, text=True)
        if completed.returncode != 0:
            print(completed.stderr[-2000:], file=sys.stderr)
            return None
        return json.loads(out.read_text())


def _distance(model, short, long) -> float:
    """RMS Fisher distance between two answers, at the longer run's answer."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    from grepvi.interop.numpyro_model import from_numpyro
    from grepvi.optim.natural_gradient import fisher_mean_quad

    entry = ALL_MODELS[model]
    families = from_numpyro(entry.model, *(jnp.asarray(a) for a in entry.args)).families
    is_list = lambda x: isinstance(x, list)  # noqa: E731 - the JSON's arrays
    to = lambda tree: jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), tree, is_leaf=is_list)  # noqa: E731
    delta = jax.tree_util.tree_map(
        lambda a, b: np.asarray(a) - np.asarray(b),
        short["params"],
        long["params"],
        is_leaf=lambda x: isinstance(x, list),
    )
    return float(np.sqrt(max(float(fisher_mean_quad(families, to(long["params"]), to(delta))), 0.0)))


def main(argv=None):
    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS, MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(ALL_MODELS))
    parser.add_argument("--budgets", nargs="+", type=float, default=[10.0, 30.0])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker[0], float(args.worker[1]), args.worker[2])
        return
    print(
        f"{'model':<14} {'T s':>5} {'it (T)':>8} {'conv (T)':>8} {'reported':>9} {'it (2T)':>8} "
        f"{'conv (2T)':>9} {'distance':>9}  verdict"
    )
    for model in args.models:
        for budget in args.budgets:
            short, long = _run(model, budget), _run(model, 2 * budget)
            if short is None or long is None:
                print(f"{model:<14} {budget:>5.0f} failed")
                continue
            distance = _distance(model, short, long)
            if long["warned"]:
                verdict = "2T not converged: no reference"
            else:
                verdict = (
                    "ok" if distance <= max(short["accuracy"], 0.0) * 2.0 + 1e-12 else "WORSE than reported"
                )
            print(
                f"{model:<14} {budget:>5.0f} {short['iterations']:>8} {str(short['converged']):>8} "
                f"{short['accuracy']:>9.4f} {long['iterations']:>8} {str(long['converged']):>9} "
                f"{distance:>9.4f}  {verdict}"
            )


if __name__ == "__main__":
    main()

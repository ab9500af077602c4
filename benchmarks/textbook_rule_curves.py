"""Each trial rule's ELBO curve on a NumPyro benchmark model, every rule alone from the same start.

The default procedure's compiled window (:func:`grepvi.inference.fitting.setup` on
``from_numpyro(model, *data)``) runs each candidate of the trial as a fixed rule for
``--steps`` steps; printed: each rule's window-median one-draw ELBO after each window of 100
steps (up to 15 of them, evenly spaced). Where the trial stops a rule at its check, this shows
what it would have done::

    python benchmarks/textbook_rule_curves.py --model claims_10k --steps 1500
"""

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None):
    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=list(ALL_MODELS), default="claims_10k")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting
    from grepvi.interop.numpyro_model import from_numpyro

    entry = ALL_MODELS[args.model]
    model = from_numpyro(entry.model, *[jnp.asarray(a) for a in entry.args])
    estimator = get_estimator("grep")
    target = model.target()
    target = target._replace(families=estimator.adapt_families(target.families))
    data = jax.tree_util.tree_map(jnp.asarray, model.data)
    prepared = fitting.setup(
        target, estimator, data=data, time_budget=1e9, model=model, check=False, seed=args.seed
    )
    candidates = prepared.plan.candidates
    length = prepared.window.length
    windows = max(1, args.steps // length)
    shown = list(range(0, windows, max(1, windows // 15)))
    print(
        f"{args.model}: window-median ELBO after windows ending at steps {[(i + 1) * length for i in shown]}"
    )
    for index, candidate in enumerate(candidates):
        state = prepared.plan.select(prepared.initial.loop, index, candidate.step_size)
        medians = []
        for _ in range(windows):
            state, _, out = prepared.window(state, data, length)
            medians.append(float(np.median(np.asarray(out["elbo"]))))
        print(f"  {candidate.label:10s} " + " ".join(f"{medians[i]:.6g}" for i in shown), flush=True)


if __name__ == "__main__":
    main()

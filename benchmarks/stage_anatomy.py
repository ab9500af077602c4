"""What each stage of a default fit did, and whether its error behaved as the controller assumes.

Runs ``from_numpyro(model, *data).fit()`` with the defaults on a model of
``textbook_models.ALL_MODELS`` (held-out and example models included) and reads the controller's
state at every window through the fit's callback. One line per stage:

* ``rule``, ``draws`` (repeats of the step's estimate), ``rho``, the averaged ``batches`` and the
  stage's wall seconds;
* ``error``: its Monte Carlo error at the end (sd, the controller's ``accuracy``);
* ``c``: the error's per-estimate constant ``error^2 x steps x draws``. Where a stage's error is
  the gradient's noise, ``c`` is the same at any step and draws (Polyak-Ruppert averaging); a
  ``c`` that grows with the draws says the draws were not what limited the error;
* ``lag1``: the lag-1 autocorrelation of the stage's batch means, averaged over the parameters
  (the batch-means MCSE assumes 0; its noise at ``n`` batches is about ``1 / sqrt(n)`` and its
  bias about ``-1 / n``);
* ``change`` and ``bias``: the Fisher-metric change of the stage's average from the previous
  one's, and the bias the controller estimated from it; ``cos``: the cosine between this
  change and the previous one in the parameters' own coordinates (a bias proportional to the
  step moves the averages the same way at every halving: near +1; independent offsets of
  each stage's average: near -0.5).

::

    python benchmarks/stage_anatomy.py horseshoe
    python benchmarks/stage_anatomy.py poisson_factorization pumps

Measured in the forty-second session (``docs/performance.md``).
"""

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _flat(tree) -> np.ndarray:
    import jax

    leaves = jax.tree_util.tree_leaves(tree)
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in leaves])


class StageRecorder:
    """The fit's callback: reads the controller's state after each window."""

    def __init__(self):
        self.stages = []
        self._current = None
        self._start = time.perf_counter()

    def _open(self, controller, event):
        if self.stages and bool(controller.has_previous):
            # the stage just ended: its final error, averaged iterations and average (the
            # callback after its last window already shows the next stage)
            ended = self.stages[-1]
            ended["error"] = float(controller.previous_accuracy)
            ended["averaged"] = int(controller.previous_iterations)
            ended["average"] = _flat(controller.previous)
        self._current = {
            "stage": int(controller.stage),
            "rule": event.label,
            "draws": int(controller.repeats),
            "rho": float(controller.step_size),
            "first": int(event.first_iteration),
            "start": time.perf_counter() - self._start,
            "batches": 0,
            "batch_means": [],
            "running_mean": None,
            "error": math.nan,
            "averaged": 0,
            "change": float(controller.stage_change),
            "bias": float(controller.stage_bias),
        }
        self.stages.append(self._current)

    def __call__(self, event):
        controller = event.run_state.controller
        if int(getattr(controller, "phase", 0)) == 0:  # the trial
            return
        if self._current is None or int(controller.stage) != self._current["stage"]:
            self._open(controller, event)
        stage = self._current
        stage.update(
            rule=event.label,
            draws=int(controller.repeats),
            rho=float(controller.step_size),
            end=time.perf_counter() - self._start,
            last=int(event.first_iteration),
        )
        batches = int(controller.batches)
        if batches > stage["batches"]:
            mean = _flat(controller.mean)
            if batches == 1:
                stage["batch_means"] = [mean]
            elif stage["running_mean"] is not None and batches == stage["batches"] + 1:
                stage["batch_means"].append(batches * mean - (batches - 1) * stage["running_mean"])
            stage["running_mean"] = mean
            stage["batches"] = batches
            stage["error"] = float(controller.accuracy)
        elif batches < stage["batches"]:  # the average restarted (a climb)
            stage.update(batches=batches, batch_means=[], running_mean=None)


def lag1(batch_means) -> float:
    """The lag-1 autocorrelation of a stage's batch means, averaged over the parameters."""
    x = np.asarray(batch_means)
    if len(x) < 4:
        return math.nan
    d = x - x.mean(0)
    variance = (d**2).mean(0)
    keep = variance > 0
    return float(((d[1:] * d[:-1]).mean(0)[keep] / variance[keep]).mean())


def report(name: str, stages: list, seconds: float, convergence, answer) -> None:
    print(f"\n{name}: {seconds:.1f} s, {convergence.num_iterations} iterations, {convergence.reason}")
    print(
        f"  {'stage':>5} {'rule':>10} {'draws':>5} {'rho':>8} {'averaged':>8} {'s':>6} {'error':>7} "
        f"{'c':>8} {'lag1':>6} {'change':>7} {'bias':>7} {'cos':>6}"
    )
    if stages and "average" not in stages[-1]:  # the last stage: the fit's answer and record
        stages[-1].update(
            average=answer, error=float(convergence.accuracy), averaged=int(convergence.averaged_iterations)
        )
    previous_change = None
    for i, stage in enumerate(stages):
        c = stage["error"] ** 2 * stage["averaged"] * stage["draws"]
        change = None
        if i and stage.get("average") is not None and stages[i - 1].get("average") is not None:
            change = stage["average"] - stages[i - 1]["average"]
        cos = math.nan
        if change is not None and previous_change is not None:
            norms = np.linalg.norm(change) * np.linalg.norm(previous_change)
            cos = float(change @ previous_change / norms) if norms > 0 else math.nan
        previous_change = change
        bias = stages[i + 1]["bias"] if i + 1 < len(stages) else convergence.stage_bias
        moved = stages[i + 1]["change"] if i + 1 < len(stages) else convergence.stage_change
        print(
            f"  {stage['stage']:>5} {stage['rule']:>10} {stage['draws']:>5} {stage['rho']:>8.4g} "
            f"{stage['averaged']:>8} {stage.get('end', stage['start']) - stage['start']:>6.1f} "
            f"{stage['error']:>7.4f} {c:>8.3g} {lag1(stage['batch_means']):>+6.2f} {moved:>7.4f} "
            f"{bias:>7.4f} {cos:>+6.2f}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    from grepvi.interop.numpyro_model import from_numpyro

    for name in args.models:
        entry = ALL_MODELS[name]
        recorder = StageRecorder()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adapted = from_numpyro(entry.model, *entry.args)
            result = adapted.fit(progress=False, seed=args.seed, callback=recorder)
        seconds = time.perf_counter() - start
        state = getattr(result, "run_state", None)  # the last stage's average: the controller's mean
        answer = None if state is None else _flat(state.controller.mean)
        report(name, recorder.stages, seconds, result.convergence, answer)


if __name__ == "__main__":
    main()

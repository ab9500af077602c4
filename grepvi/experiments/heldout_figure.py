"""The paper's Figure 2b beside ours: held-out log-likelihood per entry by data set and method.

One panel per data set (Olivetti, MNIST, Omniglot), one row per estimator; ours as a filled
dot with its spread over posterior draws (mean ± std, as the paper reports), the paper's as an
open diamond with its ± (``grepvi.experiments.paper.PAPER["test_loglik"]``). Written by ``grepvi report``
(``heldout_loglik.png``) from the runs' ``metrics.json``.
"""

import math
import re
from pathlib import Path

from grepvi.experiments.paper import PAPER

__all__ = ["heldout_figure", "paper_loglik"]

PANELS = ("olivetti", "mnist", "omniglot")
ESTIMATORS = ("grep", "bbvi", "advi")
LABELS = {"grep": "G-REP", "bbvi": "BBVI", "advi": "ADVI"}
TITLES = {
    "olivetti": "Olivetti (sparse gamma DEF)",
    "mnist": "MNIST (beta-gamma MF)",
    "omniglot": "Omniglot (beta-gamma MF)",
}


def paper_loglik(dataset: str, estimator: str) -> tuple[float, float] | None:
    """``(mean, std)`` of the paper's Figure 2b for that cell, or None."""
    text = PAPER["test_loglik"].get((dataset, estimator))
    if text is None:
        return None
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text.replace("−", "-"))]
    return numbers[0], numbers[1] if len(numbers) > 1 else 0.0


def _ours(runs, dataset, estimator):
    """The run of that cell with the most training time (the longest is the one to show)."""
    cells = [
        run
        for run in runs
        if run.dataset == dataset
        and run.estimator == estimator
        and isinstance(run.metrics.get("test_loglik_per_entry"), dict)
    ]
    if not cells:
        return None
    run = max(cells, key=lambda r: r.metrics.get("training_time_s") or 0.0)
    value = run.metrics["test_loglik_per_entry"]
    return float(value["mean"]), float(value.get("std", 0.0)), run


def heldout_figure(runs, path) -> Path | None:
    """Figure 2b, ours beside the paper's; None when no run has a held-out log-likelihood."""
    panels = [d for d in PANELS if any(_ours(runs, d, e) for e in ESTIMATORS)]
    if not panels:
        return None
    from grepvi.experiments.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 2.8), squeeze=False)
    for ax, dataset in zip(axes[0], panels, strict=True):
        ticks = []
        # the panel's scale: ten times the worst of the paper's numbers; a run below it (a
        # diverged fit) is drawn at the left edge with its value written beside it
        papers = [paper_loglik(dataset, e) for e in ESTIMATORS]
        floor = 10.0 * min((p[0] for p in papers if p is not None), default=-math.inf)
        for row, estimator in enumerate(ESTIMATORS):
            ours, paper = _ours(runs, dataset, estimator), paper_loglik(dataset, estimator)
            if ours is None and paper is None:
                continue
            ticks.append((row, LABELS[estimator]))
            if paper is not None:
                ax.errorbar(paper[0], row + 0.15, xerr=paper[1], fmt="D", mfc="none", color="0.4", capsize=3)
            if ours is not None:
                mean, std, run = ours
                seconds = run.metrics.get("training_time_s")
                note = f"{seconds:.0f} s" if seconds else ""
                if mean < floor:
                    note = f"{mean:.3g} (off scale) {note}"
                    mean, std = floor, 0.0
                    ax.errorbar(mean, row - 0.15, fmt="<", color="C3")
                else:
                    ax.errorbar(mean, row - 0.15, xerr=std, fmt="o", color="C0", capsize=3)
                if note:
                    ax.annotate(
                        note,
                        (mean, row - 0.15),
                        xytext=(4, -10),
                        textcoords="offset points",
                        fontsize=7,
                    )
        ax.set_yticks([r for r, _ in ticks], [label for _, label in ticks])
        ax.set_ylim(-0.6, len(ESTIMATORS) - 0.4)
        ax.invert_yaxis()
        ax.set_title(TITLES.get(dataset, dataset), fontsize=9)
        ax.set_xlabel("test log-likelihood per entry (higher is better)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    handles = [
        plt.Line2D([], [], marker="o", color="C0", linestyle="", label="grepvi (mean ± std over draws)"),
        plt.Line2D([], [], marker="D", mfc="none", color="0.4", linestyle="", label="paper, Fig. 2b"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path

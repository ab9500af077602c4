"""Tables and figures of finished runs, in the layout of Ruiz, Titsias & Blei (2016).

From run folders (see :mod:`grepvi.experiments.observers`) :func:`build_report` writes into one folder:

* ``elbo_vs_time.png``: ELBO against training wall time per estimator (paper Fig. 1);
* ``perplexity_vs_time.png``: held-out perplexity against time (Fig. 2a, NIPS);
* ``test_loglik.md`` / ``.csv``: average test log-likelihood per entry, mean +- std over
  posterior draws (Fig. 2b);
* ``time_per_iteration.md`` / ``.csv``: median seconds per iteration and the step size ``eta``
  (Table 1);
* ``samples.png``: ELBO and average gradient variance for several numbers of samples over
  the first 200 iterations (supplement Fig. 3);
* ``heldout_loglik.png``: the held-out log-likelihood of every run beside the paper's (Fig. 2b,
  :mod:`grepvi.experiments.heldout_figure`);
* ``reconstructions_<data>.png``: true images beside the mean observation of one posterior
  draw, per estimator (supplement Figs. 4-6);
* ``summary.md`` / ``summary.json``: all of the above, with the paper's numbers beside ours.

Figures use Matplotlib's Agg backend (no display needed).
"""

import csv
import io
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from grepvi.errors import ConfigError
from grepvi.experiments.paper import PAPER  # the paper's numbers live in one place
from grepvi.experiments.plotting import log_time_axis, pyplot
from grepvi.experiments.run_files import (
    CONFIG_FILE,
    FIGURES_DIR,
    METRICS_FILE,
    RECONSTRUCTION_FILE,
    TRACE_FILE,
    atomic_write_text,
    read_json,
    read_trace,
    write_json,
)

__all__ = ["RunRecord", "load_run", "find_runs", "run_figures", "build_report", "PAPER"]

LABELS = {"grep": "G-REP", "bbvi": "BBVI", "advi": "ADVI", "implicit": "implicit", "rsvi": "RSVI"}
COLORS = {"grep": "#1f77b4", "bbvi": "#2ca02c", "advi": "#d62728", "implicit": "#9467bd", "rsvi": "#ff7f0e"}
DATASET_LABELS = {"olivetti": "Olivetti", "nips": "NIPS", "mnist": "MNIST", "omniglot": "Omniglot"}


class RunRecord(NamedTuple):
    path: Path
    config: dict
    metrics: dict
    trace: dict

    @property
    def options(self) -> dict:
        return self.config.get("options", {})

    @property
    def estimator(self) -> str:
        return self.options.get("estimator", "?")

    @property
    def dataset(self) -> str:
        return self.config.get("dataset", {}).get("name", str(self.options.get("dataset", "?")))

    @property
    def model(self) -> str:
        return self.options.get("model", "?")

    @property
    def num_samples(self):
        return self.config.get("estimator_options", {}).get("num_samples", self.options.get("num_samples"))

    @property
    def label(self) -> str:
        return LABELS.get(self.estimator, self.estimator)


def load_run(path) -> RunRecord:
    """A finished (or interrupted) run folder; a :class:`ConfigError` if it is not one."""
    path = Path(path)
    if not (path / CONFIG_FILE).exists():
        raise ConfigError(
            f"{str(path)!r}: not a run folder (no {CONFIG_FILE}); give folders written by grepvi fit"
        )
    config = read_json(path / CONFIG_FILE)
    metrics = read_json(path / METRICS_FILE) if (path / METRICS_FILE).exists() else {}
    trace = read_trace(path / TRACE_FILE) if (path / TRACE_FILE).exists() else {}
    return RunRecord(path, config, metrics, trace)


def find_runs(paths) -> list[RunRecord]:
    """Run folders among ``paths``: each path is a run folder or holds run folders (any depth;
    of an eta search only the chosen run, named in ``eta_search.json``)."""
    runs = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ConfigError(f"report: {str(path)!r} does not exist")
        if (path / CONFIG_FILE).exists():
            runs.append(load_run(path))
            continue
        if (path / "eta_search.json").exists():
            best = read_json(path / "eta_search.json").get("best_run")
            if best and (Path(best) / CONFIG_FILE).exists():
                runs.append(load_run(best))
                continue
        found = sorted(p.parent for p in path.glob("*/" + CONFIG_FILE))
        found += sorted(p.parent for p in path.glob("*/eta_search.json"))
        if not found:
            found = sorted(p.parent for p in path.rglob(CONFIG_FILE))
            if not found:
                raise ConfigError(f"report: {str(path)!r} holds no run (no {CONFIG_FILE} below it)")
            runs += [load_run(p) for p in found]
        else:
            runs += find_runs(found)
    unique = {}
    for run in runs:
        unique.setdefault(run.path.resolve(), run)
    return list(unique.values())


# --- helpers ------------------------------------------------------------------------------------


def _block_medians(xs: np.ndarray, ys: np.ndarray, num_blocks: int = 200):
    """``(x, y)`` medians of consecutive blocks: a smooth curve robust to the single-draw ELBO's
    occasional huge negative values."""
    # Log-spaced block edges: fine early on, where a log time axis spreads the iterations out.
    edges = np.unique(np.concatenate([[0], np.geomspace(1, xs.size, num_blocks).astype(int)]))
    centres = [np.median(xs[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    medians = [np.median(ys[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return np.asarray(centres), np.asarray(medians)


def _robust_ylim(curves: list[np.ndarray]):
    """Limits that show where the curves settle, not their first wild iterations: from below the
    lowest final level by three times the spread of the final levels (at least half the lowest
    final level's magnitude, or the curves' own range when that is smaller) up to the highest
    point."""
    finals, highs, lows = [], [], []
    for values in curves:
        values = np.asarray(values, np.float64)
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        finals.append(np.median(values[-max(1, values.size // 10) :]))
        highs.append(np.max(values))
        lows.append(np.min(values))
    if not finals:
        return None
    high = max(highs)
    reference = min(finals)
    spread = max(finals) - reference
    low = max(min(lows), reference - max(3.0 * spread, 0.5 * abs(reference), 1e-9))
    span = max(high - low, abs(high) * 1e-3, 1e-9)
    return low - 0.03 * span, high + 0.05 * span


def _fmt(value, digits=4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, int | np.integer):
        return str(int(value))
    return f"{value:.{digits}g}"


def _plus_minus(mean, std) -> str:
    """``mean ± std`` with one decimal (``–`` where metrics.json holds null)."""
    shown = lambda value: "–" if value is None or not math.isfinite(value) else f"{value:.1f}"
    return f"{shown(mean)} ± {shown(std)}"


def _loglik_cell(metrics) -> str:
    value = metrics.get("test_loglik_per_entry")
    if not value:
        return "–"
    mean, std = value.get("mean"), value.get("std")
    if mean is None or not math.isfinite(mean):
        return "–"
    # Two significant digits of the standard deviation, as the paper prints them.
    digits = max(1, 1 - int(math.floor(math.log10(abs(std)))) if std and std > 0 else 3)
    digits = min(digits, 6)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _csv_table(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _order(run) -> tuple:
    return (list(LABELS).index(run.estimator) if run.estimator in LABELS else 99, run.num_samples or 0)


def _group(runs) -> dict:
    groups = {}
    for run in sorted(runs, key=_order):
        groups.setdefault((run.model, run.dataset), []).append(run)
    return groups


def _title(model, dataset) -> str:
    return f"{DATASET_LABELS.get(dataset, dataset)} ({model})"


def _label(run: RunRecord, runs) -> str:
    same = [
        r for r in runs if r.estimator == run.estimator and (r.model, r.dataset) == (run.model, run.dataset)
    ]
    label = run.label
    if len(same) > 1:
        samples = {r.num_samples for r in same}
        etas = {r.metrics.get("eta", r.options.get("step_size")) for r in same}
        if len(samples) > 1:
            label += f", S={run.num_samples}"
        if len(etas) > 1:
            step_size = run.options.get("step_size")
            label += ", default procedure" if step_size is None else f", η={step_size:g}"
    return label


# --- figures ------------------------------------------------------------------------------------


def _plot_curves(ax, runs, column, *, x="wall_time", smooth=True):
    curves = []
    for run in runs:
        if column not in run.trace or x not in run.trace:
            continue
        xs, ys = run.trace[x], run.trace[column]
        keep = np.isfinite(ys) & np.isfinite(xs) & (xs > 0) & _kept_rule_rows(run.trace)
        xs, ys = xs[keep], ys[keep]
        if ys.size == 0:
            continue
        color = COLORS.get(run.estimator)
        if len(runs) > 3 or len({r.estimator for r in runs}) < len(runs):
            color = None
        if smooth and ys.size > 200:
            bx, by = _block_medians(xs, ys)
            ax.plot(bx, by, color=color, linewidth=1.8, label=_label(run, runs))
            ys = by
        else:
            ax.plot(
                xs,
                ys,
                color=color,
                linewidth=1.6,
                marker="o" if ys.size < 30 else None,
                markersize=3,
                label=_label(run, runs),
            )
        curves.append(ys)
    return curves


def _kept_rule_rows(trace: dict) -> np.ndarray:
    """Rows of the trace on the kept rule's path: the default procedure's trial runs every
    candidate from the same start; the curves follow the rule it kept (its trial windows
    included), not the candidates it dropped."""
    phase, rule = trace.get("phase"), trace.get("rule")
    length = len(next(iter(trace.values()))) if trace else 0
    if phase is None or rule is None:
        return np.ones(length, bool)
    after = rule[phase > 0]
    if after.size == 0:
        return np.ones(length, bool)
    return (phase > 0) | (rule == after[0])


def elbo_figure(runs, path, *, x="wall_time") -> Path | None:
    """ELBO against training wall time (log axis), one line per run (paper Fig. 1)."""
    runs = [run for run in runs if "elbo" in run.trace]
    if not runs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=120)
    curves = _plot_curves(ax, runs, "elbo", x=x)
    if not curves:
        plt.close(fig)
        return None
    limits = _robust_ylim(curves)
    if limits is not None:
        ax.set_ylim(*limits)
    log_time_axis(ax)
    ax.set_xlabel("training wall time (s, log scale)" if x == "wall_time" else "iteration")
    ax.set_ylabel("ELBO (nats; median over blocks of iterations)")
    ax.set_title(f"ELBO — {_title(runs[0].model, runs[0].dataset)}")
    ax.grid(True, which="both", alpha=0.25)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def perplexity_figure(runs, path) -> Path | None:
    """Held-out perplexity against training wall time (paper Fig. 2a)."""
    runs = [run for run in runs if "perplexity" in run.trace and np.isfinite(run.trace["perplexity"]).any()]
    if not runs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=120)
    curves = _plot_curves(ax, runs, "perplexity")
    values = np.concatenate([c[np.isfinite(c)] for c in curves]) if curves else np.zeros(0)
    log_time_axis(ax)
    if values.size and values.max() / max(values.min(), 1e-9) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("training wall time (s, log scale)")
    ax.set_ylabel("held-out perplexity (lower is better)")
    ax.text(
        0.99,
        0.98,
        "one posterior draw every 10 iterations;\nmedians over blocks of evaluations",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=7,
        color="0.4",
    )
    ax.set_title(f"Perplexity — {_title(runs[0].model, runs[0].dataset)}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def samples_figure(runs, path, max_iterations: int = 200) -> Path | None:
    """ELBO and average gradient variance over the first iterations for several numbers of
    samples per gradient (supplement Fig. 3). The variance is that of the S-sample average,
    ``per-draw variance / S``."""
    runs = [run for run in runs if "elbo" in run.trace]
    counts = {run.num_samples for run in runs}
    if len(counts) < 2:
        return None
    runs = sorted(runs, key=lambda run: run.num_samples or 0)
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.3), dpi=120)
    cmap = plt.get_cmap("viridis")
    for i, run in enumerate(runs):
        color = cmap(i / max(1, len(runs) - 1))
        it = run.trace["iteration"]
        keep = it <= max_iterations
        label = f"S = {run.num_samples}"
        skipped = int(np.nansum(run.trace.get("skipped", np.zeros(1))[keep]))
        if skipped:
            label += f" ({skipped} steps skipped)"
        # -ELBO on a log axis: the first iterations span orders of magnitude.
        left.plot(it[keep], -run.trace["elbo"][keep], color=color, linewidth=1.4, label=label)
        if "gradient_variance" in run.trace:
            variance = run.trace["gradient_variance"][keep] / float(run.num_samples or 1)
            right.plot(it[keep], variance, color=color, linewidth=1.4, label=label)
    left.set_yscale("log")
    left.set_xlabel("iteration")
    left.set_ylabel("−ELBO (nats, log scale; lower is better)")
    left.set_title("ELBO")
    right.set_yscale("log")
    right.set_xlabel("iteration")
    right.set_ylabel("variance of the S-sample mean\n(average over components)")
    right.set_title("Average gradient variance")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(frameon=False, fontsize=8)
    first = runs[0]
    fig.suptitle(
        f"{LABELS.get(first.estimator, first.estimator)} with S samples — "
        f"{_title(first.model, first.dataset)}"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _images(values, image_shape):
    values = np.asarray(values, np.float64)
    return values.reshape((values.shape[0],) + tuple(int(s) for s in image_shape))


def reconstruction_figure(runs, path, count: int = 8) -> Path | None:
    """True training images (top row) and, per estimator, the mean observation given one
    posterior draw (supplement Figs. 4-6)."""
    panels = []
    truth = None
    for run in runs:
        file = run.path / RECONSTRUCTION_FILE
        if not file.exists():
            continue
        with np.load(file) as data:
            shape = tuple(data["image_shape"])
            if truth is None:
                truth = _images(data["true"][:count], shape)
            panels.append((run.label, _images(data["reconstruction"][:count], shape)))
    if truth is None or not panels:
        return None
    plt = pyplot()
    rows = [("true", truth)] + panels
    columns = truth.shape[0]
    fig, axes = plt.subplots(
        len(rows), columns, figsize=(1.15 * columns + 0.9, 1.15 * len(rows) + 0.7), dpi=110, squeeze=False
    )
    for r, (name, images) in enumerate(rows):
        for c in range(columns):
            ax = axes[r, c]
            if c < images.shape[0]:
                # One grey scale per column, set by the true image, so that the rows compare.
                top = float(np.max(truth[c])) if np.max(truth[c]) > 0 else 1.0
                ax.imshow(
                    np.clip(images[c], 0.0, top), cmap="gray", vmin=0.0, vmax=top, interpolation="nearest"
                )
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=10)
    fig.suptitle(
        f"Reconstructions — {_title(runs[0].model, runs[0].dataset)}\n"
        "(mean of the observations given one posterior draw)",
        fontsize=10,
    )
    fig.subplots_adjust(
        left=0.09, right=0.99, bottom=0.02, top=1.0 - 0.6 / (1.15 * len(rows) + 0.7), wspace=0.04, hspace=0.06
    )
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def run_figures(path) -> list[Path]:
    """The figures of one run, into ``<run>/figures``."""
    run = load_run(path)
    folder = run.path / FIGURES_DIR
    folder.mkdir(exist_ok=True)
    made = [
        elbo_figure([run], folder / "elbo_vs_time.png"),
        perplexity_figure([run], folder / "perplexity_vs_time.png"),
        reconstruction_figure([run], folder / "reconstructions.png"),
    ]
    return [p for p in made if p is not None]


# --- tables ---------------------------------------------------------------------------------------


def _tables(runs):
    header_ll = [
        "data set",
        "model",
        "estimator",
        "test log-lik per entry (ours)",
        "log-mean-exp (ours)",
        "paper",
        "iterations",
        "training time (s)",
    ]
    rows_ll = []
    header_time = [
        "data set",
        "estimator",
        "time / iteration (s, ours)",
        "paper (s)",
        "step rule (ours)",
        "eta (paper)",
        "samples / gradient",
        "iterations",
    ]
    rows_time = []
    header_ppl = ["data set", "estimator", "perplexity (ours)", "last traced", "paper"]
    rows_ppl = []
    for run in sorted(
        runs,
        key=lambda r: (
            list(DATASET_LABELS).index(r.dataset) if r.dataset in DATASET_LABELS else 99,
            r.dataset,
            r.model,
            list(LABELS).index(r.estimator) if r.estimator in LABELS else 99,
            r.num_samples or 0,
        ),
    ):
        key = (run.dataset, run.estimator)
        m = run.metrics
        rows_ll.append(
            [
                DATASET_LABELS.get(run.dataset, run.dataset),
                run.model,
                _label(run, runs),
                _loglik_cell(m),
                _fmt(m.get("test_loglik_logmeanexp")),
                PAPER["test_loglik"].get(key, "–"),
                _fmt(m.get("iterations")),
                _fmt(m.get("training_time_s"), 3),
            ]
        )
        rows_time.append(
            [
                DATASET_LABELS.get(run.dataset, run.dataset),
                _label(run, runs),
                _fmt(m.get("time_per_iteration_s"), 3),
                _fmt(PAPER["time_per_iteration"].get(key)),
                _step_rule(m, run.options),
                _fmt(PAPER["eta"].get(key)),
                _fmt(run.num_samples),
                _fmt(m.get("iterations")),
            ]
        )
        if "perplexity" in m:
            rows_ppl.append(
                [
                    DATASET_LABELS.get(run.dataset, run.dataset),
                    _label(run, runs),
                    _plus_minus(m.get("perplexity"), m.get("perplexity_std")),
                    _fmt(m.get("perplexity_last"), 5),
                    "Fig. 2a (curve only)",
                ]
            )
    return (header_ll, rows_ll), (header_time, rows_time), (header_ppl, rows_ppl)


def build_report(paths, out) -> dict:
    """Tables and figures of the runs under ``paths`` into the folder ``out``.

    Returns a summary: ``{"runs": [...], "tables": {...}, "figures": [...], "markdown": str}``.
    """
    runs = find_runs(paths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for (_, dataset), group in _group(runs).items():
        suffix = "" if len(_group(runs)) == 1 else f"_{dataset}"
        by_samples = {}
        for run in group:
            by_samples.setdefault(run.estimator, set()).add(run.num_samples)
        sweep = any(len(counts) > 1 for counts in by_samples.values())
        if sweep:
            figures.append(samples_figure(group, out / f"samples{suffix}.png"))
        else:
            figures.append(elbo_figure(group, out / f"elbo_vs_time{suffix}.png"))
            figures.append(perplexity_figure(group, out / f"perplexity_vs_time{suffix}.png"))
            figures.append(
                reconstruction_figure(group, out / f"reconstructions{suffix or '_' + dataset}.png")
            )
    from grepvi.experiments.heldout_figure import heldout_figure

    figures.append(heldout_figure(runs, out / "heldout_loglik.png"))
    figures = [f for f in figures if f is not None]
    (h_ll, r_ll), (h_t, r_t), (h_p, r_p) = _tables(runs)
    atomic_write_text(out / "test_loglik.md", _markdown_table(h_ll, r_ll))
    atomic_write_text(out / "test_loglik.csv", _csv_table(h_ll, r_ll))
    atomic_write_text(out / "time_per_iteration.md", _markdown_table(h_t, r_t))
    atomic_write_text(out / "time_per_iteration.csv", _csv_table(h_t, r_t))
    parts = [
        "# grepvi report\n",
        "## Test log-likelihood per entry (mean ± std over posterior draws)\n",
        _markdown_table(h_ll, r_ll),
        "\n## Time per iteration and step size η\n",
        _markdown_table(h_t, r_t),
    ]
    if r_p:
        atomic_write_text(out / "perplexity.md", _markdown_table(h_p, r_p))
        parts += ["\n## Held-out perplexity (NIPS)\n", _markdown_table(h_p, r_p)]
    parts.append("\n## Figures\n")
    parts += [f"- ![{f.stem}]({f.name})\n" for f in figures]
    parts.append("\n## Runs\n")
    parts += [
        f"- `{run.path}`: {run.label} on {run.dataset}, {_step_rule(run.metrics, run.options)}, "
        f"{_fmt(run.metrics.get('iterations'))} iterations\n"
        for run in runs
    ]
    markdown = "".join(parts)
    atomic_write_text(out / "summary.md", markdown)
    summary = {
        "runs": [str(run.path) for run in runs],
        "figures": [str(f) for f in figures],
        "tables": {
            "test_loglik": [h_ll] + r_ll,
            "time_per_iteration": [h_t] + r_t,
            "perplexity": [h_p] + r_p,
        },
    }
    write_json(out / "summary.json", summary)
    summary["markdown"] = markdown
    return summary


def _step_rule(metrics: dict, options: dict) -> str:
    """The update rule a run used: the default procedure's kept rule and its final step size
    (``adam-0.1, final step 0.0125``), or the paper's schedule (``Eq. 9, η = 0.5``)."""
    convergence = metrics.get("convergence") or {}
    if convergence.get("direction"):
        rule = convergence["direction"]
        return f"{rule}, final step {_fmt(convergence.get('step_size'))}"
    return f"Eq. 9, η = {_fmt(metrics.get('eta', options.get('step_size')))}"

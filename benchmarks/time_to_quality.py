"""When does a run's ELBO pass given levels? Reads the ``trace.csv`` of ``grepvi fit`` runs.

The issue's reference levels for the sparse gamma DEF on Olivetti (issue 6): the authors'
G-REP script reaches about -1.07e7 in 5 minutes on this machine and their RSVI script
-7.9e6; their published G-REP trace reaches -7.8e6 after 1,000 iterations (about 10 minutes on
their machine) and -6.65e6 after 10 hours.

The ELBO of one iteration is a one-draw estimate; a level counts as passed at the first
iteration where the mean over the ``--window`` iterations ending there is above it. Wall time
is the run's training time (compilation and evaluation excluded, see REPRODUCING.md).

    python -m benchmarks.time_to_quality runs/ttq-olivetti-grep [more run folders]
"""

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

OLIVETTI_LEVELS = (-1.07e7, -7.9e6, -7.8e6, -6.65e6)


def read_trace(folder):
    with open(Path(folder) / "trace.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    iteration = np.array([int(r["iteration"]) for r in rows])
    wall_time = np.array([float(r["wall_time"]) for r in rows])
    elbo = np.array([float(r["elbo"]) if r["elbo"] not in ("", "nan") else np.nan for r in rows])
    return iteration, wall_time, elbo


def first_passing(elbo, level, window):
    """Index of the first iteration whose trailing ``window``-mean ELBO exceeds ``level``."""
    finite = np.where(np.isfinite(elbo), elbo, -np.inf)
    cumulative = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(finite), finite, -1e300))])
    for end in range(window, len(elbo) + 1):
        mean = (cumulative[end] - cumulative[end - window]) / window
        if mean > level:
            return end - 1
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--levels", default=",".join(f"{v:g}" for v in OLIVETTI_LEVELS))
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args(argv)
    levels = [float(v) for v in args.levels.split(",")]
    print(f"{'run':40s} {'level':>10s} {'iteration':>10s} {'seconds':>9s}")
    for folder in args.runs:
        iteration, wall_time, elbo = read_trace(folder)
        for level in levels:
            index = first_passing(elbo, level, args.window)
            if index is None:
                print(f"{folder:40s} {level:10.3g} {'not passed':>10s} {'-':>9s}")
            else:
                print(f"{folder:40s} {level:10.3g} {iteration[index]:10d} {wall_time[index]:9.1f}")
        tail = elbo[-max(1, len(elbo) // 10) :]
        print(f"{folder:40s} final: {len(elbo)} iterations in {wall_time[-1]:.0f} s, "
              f"ELBO (mean of the last 10%) {np.nanmean(tail):.4g}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Matplotlib for the run folders' figures: the non-interactive backend, loaded on first use."""

import math

__all__ = ["log_time_axis", "pyplot"]


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend (figures are written to files, no display)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def log_time_axis(ax) -> None:
    """Puts the x axis of ``ax`` (plotted already) on a log scale labelled with plain numbers.

    Matplotlib labels a log axis spanning less than about two decades at its minor ticks
    (``3x10^0 4x10^0 ... 6x10^1``), and the labels run into each other (the demo's 3-60 s
    ELBO figure). Here the labels are 1, 2, 5, 10, 20, 50, ... over up to 3.5 decades and
    the powers of ten beyond, written as numbers; minor ticks stay unlabelled.
    """
    from matplotlib import ticker

    ax.set_xscale("log")
    low, high = ax.get_xlim()
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    subs = (1.0, 2.0, 5.0) if decades <= 3.5 else (1.0,)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10.0, subs=subs))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())

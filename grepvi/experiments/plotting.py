"""Matplotlib for the run folders' figures: the non-interactive backend, loaded on first use."""

__all__ = ["pyplot"]


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend (figures are written to files, no display)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt

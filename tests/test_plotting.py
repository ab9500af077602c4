"""grepvi.experiments.plotting: the log time axis of the run folders' figures."""

import numpy as np
import pytest

from grepvi.experiments.plotting import log_time_axis, pyplot


def _labels(span):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=120)
    ax.plot(np.geomspace(*span, 50), np.linspace(0.0, 1.0, 50))
    log_time_axis(ax)
    fig.canvas.draw()
    low, high = ax.get_xlim()
    major = [t for t in ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high and t.label1.get_visible()]
    texts = [t.label1.get_text() for t in major]
    boxes = [t.label1.get_window_extent() for t in major if t.label1.get_text()]
    minor = [t.label1.get_text() for t in ax.xaxis.get_minor_ticks()]
    plt.close(fig)
    return texts, boxes, minor


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        ((3.0, 60.0), ["5", "10", "20", "50"]),
        ((0.5, 600.0), ["0.5", "1", "2", "5", "10", "20", "50", "100", "200", "500"]),
    ],
)
def test_a_short_time_span_is_labelled_with_plain_numbers_that_do_not_overlap(span, expected):
    """Matplotlib's own labels of a 3-60 s log axis are its minor ticks, ``3x10^0``,
    ``4x10^0``, ..., written into each other (the demo's ELBO figure)."""
    texts, boxes, minor = _labels(span)
    assert texts == expected
    assert all(text == "" for text in minor)
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert left.x1 < right.x0


def test_a_long_time_span_is_labelled_at_powers_of_ten():
    texts, boxes, _ = _labels((0.1, 2e4))
    assert texts == ["0.1", "1", "10", "100", "1000", "10000"]
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert left.x1 < right.x0

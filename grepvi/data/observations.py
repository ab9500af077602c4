"""The observation matrix a model takes: validated once, before any program sees it.

The paper's models read an ``(N, D)`` matrix of Poisson counts (sparse gamma DEF) or of
zeros and ones (beta-gamma MF). :func:`observation_matrix` checks it without a float64 copy
of the whole matrix (the full Omniglot set is 1.4 GB in float32) and returns float32.
"""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from grepvi.errors import DataError

__all__ = ["observation_matrix"]


def observation_matrix(data, likelihood: str, argument: str = "data"):
    """Validates observations for ``likelihood`` ("poisson" or "bernoulli"); float32 ``(N, D)``.

    Raises :class:`~grepvi.DataError` naming ``argument``, what was expected and what was found.
    """
    try:
        values = np.asarray(data)
    except Exception as error:  # noqa: BLE001 - anything that is not an array
        raise DataError(f"{argument}: expected a 2-D array, found {type(data).__name__}") from error
    if values.dtype == object or not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise DataError(f"{argument}: expected a numeric 2-D array, found dtype {values.dtype}")
    if np.issubdtype(values.dtype, np.complexfloating):
        raise DataError(f"{argument}: expected real values, found dtype {values.dtype}")
    if values.ndim != 2:
        raise DataError(
            f"{argument}: expected a 2-D array (observations x dimensions), "
            f"found {values.ndim} dimension(s), shape {values.shape}"
        )
    if min(values.shape) == 0:
        raise DataError(f"{argument}: expected at least one row and one column, found shape {values.shape}")
    # Checked in blocks of rows in float64, so that no float64 copy or boolean mask of the
    # whole N x D matrix is made (the full Omniglot set is 1.4 GB in float32).
    nonfinite = _count_first(values, lambda block: ~np.isfinite(block))
    if nonfinite.count:
        raise DataError(
            f"{argument}: expected finite values; found {nonfinite.count} NaN or infinite "
            f"value(s), the first at index {nonfinite.first}"
        )
    if likelihood == "poisson":
        negative = _count_first(values, lambda block: block < 0)
        if negative.count:
            raise DataError(
                f"{argument}: Poisson counts must be non-negative integers; found "
                f"{negative.count} negative value(s) (min {float(values.min())!r}, "
                f"the first at index {negative.first})"
            )
        fractional = _count_first(values, lambda block: block != np.round(block))
        if fractional.count:
            index = fractional.first
            raise DataError(
                f"{argument}: Poisson counts must be non-negative integers; found "
                f"{fractional.count} non-integer value(s) (the first {float(values[index])!r} "
                f"at index {index})"
            )
        if values.max() > 2**24:
            raise DataError(
                f"{argument}: Poisson counts must be at most 2**24 = 16777216 to be exact in "
                f"float32; found max {float(values.max())!r}"
            )
    elif likelihood == "bernoulli":
        other = _count_first(values, lambda block: (block != 0) & (block != 1))
        if other.count:
            index = other.first
            raise DataError(
                f"{argument}: Bernoulli observations must be 0 or 1; found {other.count} "
                f"other value(s) (the first {float(values[index])!r} at index {index})"
            )
    else:  # pragma: no cover - programming error
        raise ValueError(f"unknown likelihood {likelihood!r}")
    return jnp.asarray(values, jnp.float32)


def _first(mask) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


class _Found(NamedTuple):
    count: int
    first: tuple[int, ...] | None


_BLOCK_ELEMENTS = 2**22  # rows per block: about 32 MB of float64


def _count_first(values, predicate) -> _Found:
    """How many entries of ``values`` satisfy ``predicate`` (evaluated in float64 on blocks of
    rows), and the index of the first."""
    rows = max(1, _BLOCK_ELEMENTS // max(1, values.shape[1]))
    count, first = 0, None
    for start in range(0, values.shape[0], rows):
        mask = predicate(np.asarray(values[start : start + rows], np.float64))
        found = int(np.count_nonzero(mask))
        if found and first is None:
            row, column = _first(mask)
            first = (start + row, column)
        count += found
    return _Found(count, first)

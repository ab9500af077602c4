"""Checks on data files and arrays, each raising :class:`~grepvi.errors.DataError`.

The models of Ruiz, Titsias & Blei (2016, "The Generalized Reparameterization Gradient",
experiments section) take either Poisson counts (sparse gamma DEF on Olivetti faces and NIPS
bag of words) or binary observations (beta-gamma matrix factorization on binarized MNIST and
Omniglot). Every check here names the argument or file, what was expected and what was found,
so the command line can print the message as it is.
"""

import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from grepvi.errors import DataError

__all__ = [
    "LIKELIHOODS",
    "read_npz",
    "read_mat",
    "check_image_stack",
    "check_matrix",
    "check_counts",
    "check_binary",
    "check_likelihood",
    "check_values",
    "infer_likelihood",
    "check_split",
    "check_fraction",
    "check_positive_int",
    "check_options",
    "check_seed",
]

LIKELIHOODS = ("poisson", "bernoulli")


def _describe_keys(keys) -> str:
    return ", ".join(sorted(keys)) if keys else "none"


def read_npz(
    path: str | os.PathLike, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Read the named arrays of an ``.npz`` file (no pickles), all at once.

    Raises :class:`DataError` when the file is not a zip of ``.npy`` arrays, is truncated, or
    lacks one of the ``required`` arrays (naming the missing ones and those present).
    """
    path = Path(path)
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as handle:
            starts_like_zip = handle.read(4) == b"PK\x03\x04"
        found = (
            "found the start of a zip archive but not its end: the file is truncated"
            if starts_like_zip
            else "found no zip archive: the file is of another format"
        )
        raise DataError(
            f"{path}: not a valid .npz file (expected a complete zip archive of .npy arrays; {found})"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            present = set(archive.files)
            missing = [name for name in required if name not in present]
            if missing:
                raise DataError(
                    f"{path}: missing array(s) {', '.join(missing)} in the .npz file; "
                    f"expected {', '.join(required)}, found {_describe_keys(present)}"
                )
            wanted = [name for name in (*required, *optional) if name in present]
            return {name: archive[name] for name in wanted}
    except DataError:
        raise
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise DataError(
            f"{path}: not a valid .npz file (expected a complete zip archive of .npy arrays; "
            f"the file is truncated or of another format: {error})"
        ) from error
    except (ValueError, OSError) as error:
        raise DataError(
            f"{path}: not a valid .npz file (expected a zip archive of .npy arrays without "
            f"pickles; reading it failed: {error})"
        ) from error


def read_mat(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read the variables of a MATLAB ``.mat`` file (v4 to v7.2) with :func:`scipy.io.loadmat`.

    Raises :class:`DataError` when the file is not a readable MAT file or is truncated.
    """
    import scipy.io
    from scipy.io.matlab import MatReadError

    path = Path(path)
    errors = (MatReadError, ValueError, TypeError, KeyError, IndexError, OSError, EOFError)
    try:
        contents = scipy.io.loadmat(path)
    except (*errors, struct.error, zlib.error) as error:
        raise DataError(
            f"{path}: not a valid MATLAB .mat file (expected MAT v4 to v7.2 as read by "
            f"scipy.io.loadmat; the file is truncated or of another format: {error})"
        ) from error
    return {name: value for name, value in contents.items() if not name.startswith("__")}


def check_image_stack(images: np.ndarray, argument: str) -> np.ndarray:
    """Require a non-empty stack of images of one shape, ``(n, height, width)``."""
    images = np.asarray(images)
    if images.dtype == object:
        raise DataError(
            f"{argument}: expected a numeric array of images (n, height, width), "
            "found images with inconsistent shapes (an object array)"
        )
    if images.ndim != 3:
        raise DataError(
            f"{argument}: expected images of shape (n, height, width), found an array of shape {images.shape}"
        )
    if min(images.shape) == 0:
        raise DataError(
            f"{argument}: expected at least one image of non-zero size, found shape {images.shape}"
        )
    return images


def check_matrix(matrix: np.ndarray, argument: str) -> np.ndarray:
    """Require a numeric matrix of observations, ``(n, d)`` with ``n, d >= 1``."""
    matrix = np.asarray(matrix)
    if matrix.dtype == object or matrix.ndim != 2:
        raise DataError(
            f"{argument}: expected a numeric matrix of shape (n, d), "
            f"found an array of shape {matrix.shape} and dtype {matrix.dtype}"
        )
    if min(matrix.shape) == 0:
        raise DataError(f"{argument}: expected at least one row and one column, found shape {matrix.shape}")
    if not (np.issubdtype(matrix.dtype, np.number) or matrix.dtype == bool):
        raise DataError(f"{argument}: expected numeric values, found dtype {matrix.dtype}")
    return matrix


def _first_bad(mask: np.ndarray, values: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    count = int(mask.sum())
    entries = "1 entry" if count == 1 else f"{count} entries"
    return f"{entries}, the first at index {index} with value {values[index].item()!r}"


def check_counts(values: np.ndarray, argument: str) -> None:
    """Require finite, non-negative, integer-valued counts (the Poisson likelihood's support)."""
    values = np.asarray(values)
    if values.dtype == bool or np.issubdtype(values.dtype, np.unsignedinteger):
        return
    if np.issubdtype(values.dtype, np.integer):
        bad = values < 0
        if bad.any():
            raise DataError(
                f"{argument}: expected non-negative counts for the Poisson likelihood, "
                f"found negative counts ({_first_bad(bad, values)})"
            )
        return
    if not np.issubdtype(values.dtype, np.floating):
        raise DataError(f"{argument}: expected numeric counts, found dtype {values.dtype}")
    not_finite = ~np.isfinite(values)
    if not_finite.any():
        raise DataError(
            f"{argument}: expected finite counts for the Poisson likelihood, "
            f"found NaN or infinite values ({_first_bad(not_finite, values)})"
        )
    negative = values < 0
    if negative.any():
        raise DataError(
            f"{argument}: expected non-negative counts for the Poisson likelihood, "
            f"found negative counts ({_first_bad(negative, values)})"
        )
    fractional = values != np.round(values)
    if fractional.any():
        raise DataError(
            f"{argument}: expected integer counts for the Poisson likelihood, "
            f"found fractional counts ({_first_bad(fractional, values)})"
        )


def check_binary(values: np.ndarray, argument: str) -> None:
    """Require values in {0, 1} (the Bernoulli likelihood's support)."""
    values = np.asarray(values)
    if values.dtype == bool or values.size == 0:
        return
    if np.issubdtype(values.dtype, np.integer) and values.min() >= 0 and values.max() <= 1:
        return
    bad = (values != 0) & (values != 1)
    if bad.any():
        raise DataError(
            f"{argument}: expected binary values in {{0, 1}} for the Bernoulli likelihood, "
            f"found other values ({_first_bad(bad, values)})"
        )


def check_likelihood(likelihood: str, argument: str = "likelihood") -> str:
    """Require one of :data:`LIKELIHOODS`; return it in lower case."""
    if not isinstance(likelihood, str) or likelihood.lower() not in LIKELIHOODS:
        raise DataError(f"{argument}: expected one of {', '.join(LIKELIHOODS)}, found {likelihood!r}")
    return likelihood.lower()


def check_values(values: np.ndarray, likelihood: str, argument: str) -> None:
    """Require values in the support of ``likelihood`` ("poisson" or "bernoulli")."""
    if check_likelihood(likelihood) == "poisson":
        check_counts(values, argument)
    else:
        check_binary(values, argument)


def infer_likelihood(values: np.ndarray, argument: str) -> str:
    """Infer "bernoulli" when every value is 0 or 1, else "poisson" when all are counts.

    Raises :class:`DataError` when the values fit neither (negative, fractional, NaN).
    """
    values = np.asarray(values)
    if values.dtype == bool or np.isin(values, (0, 1)).all():
        return "bernoulli"
    try:
        check_counts(values, argument)
    except DataError as error:
        raise DataError(
            f"{error} (the likelihood was inferred; the values are neither binary nor counts)"
        ) from None
    return "poisson"


def check_split(
    train_indices: np.ndarray, test_indices: np.ndarray, num_rows: int, argument: str
) -> tuple[np.ndarray, np.ndarray]:
    """Require two non-empty, disjoint sets of row indices in ``[0, num_rows)``.

    Returns both as int64 arrays. Raises :class:`DataError` for an empty side, an index out of
    range, a non-integer index, a repeated index, or a row in both train and test.
    """
    checked = []
    for side, indices in (("train", train_indices), ("test", test_indices)):
        indices = np.asarray(indices)
        label = f"{argument}, {side} rows"
        if indices.size == 0:
            raise DataError(f"{label}: expected at least one row, found an empty {side} split")
        if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
            raise DataError(
                f"{label}: expected a 1-d array of integer row indices, "
                f"found shape {indices.shape} and dtype {indices.dtype}"
            )
        out_of_range = (indices < 0) | (indices >= num_rows)
        if out_of_range.any():
            raise DataError(
                f"{label}: expected row indices in [0, {num_rows}), found {_first_bad(out_of_range, indices)}"
            )
        if np.unique(indices).size != indices.size:
            raise DataError(f"{label}: expected distinct row indices, found repeated indices")
        checked.append(indices.astype(np.int64))
    overlap = np.intersect1d(*checked)
    if overlap.size:
        raise DataError(
            f"{argument}: expected disjoint train and test rows, found {overlap.size} row(s) in "
            f"both (first: {int(overlap[0])})"
        )
    return checked[0], checked[1]


def check_fraction(value: float, argument: str) -> float:
    """Require a number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise DataError(f"{argument}: expected a number in (0, 1), found {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise DataError(f"{argument}: expected a number strictly between 0 and 1, found {value}")
    return float(value)


def check_positive_int(value: int, argument: str) -> int:
    """Require an integer of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise DataError(f"{argument}: expected a positive integer, found {value!r}")
    return int(value)


def check_options(loader, options: dict, label: str) -> None:
    """Require that every key of ``options`` is a keyword argument of ``loader``.

    Raises :class:`DataError` naming the unknown options and those ``label`` accepts.
    """
    import inspect

    parameters = inspect.signature(loader).parameters
    accepted = [
        name
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("path", "seed")
    ]
    unknown = [name for name in options if name not in accepted]
    if unknown:
        raise DataError(
            f"options for {label}: expected only {', '.join(accepted) or 'no options'}, "
            f"found unknown option(s) {', '.join(unknown)}"
        )


def check_seed(seed: int) -> int:
    """Require a non-negative integer seed."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise DataError(f"seed: expected a non-negative integer, found {seed!r}")
    return int(seed)

"""The :class:`Dataset` record every loader returns, and where data files are looked up.

The four data sets are those of Ruiz, Titsias & Blei (2016, "The Generalized
Reparameterization Gradient", experiments section): Olivetti faces and NIPS 2011 bag of words
for the sparse gamma DEF (Poisson likelihood), binarized MNIST and Omniglot for beta-gamma
matrix factorization (Bernoulli likelihood).

Data files live in one directory, given by ``--data-dir`` (the ``data_dir`` argument) or else
by the environment variable ``GREPVI_DATA_DIR``.
"""

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from grepvi.data.validation import check_likelihood, check_matrix, check_values
from grepvi.errors import DataError

__all__ = [
    "Dataset",
    "DATASET_NAMES",
    "DATA_DIR_ENVIRONMENT_VARIABLE",
    "resolve_data_dir",
    "find_data_file",
    "resolve_file",
    "make_dataset",
]

DATASET_NAMES = ("olivetti", "nips", "mnist", "omniglot")
DATA_DIR_ENVIRONMENT_VARIABLE = "GREPVI_DATA_DIR"


class Dataset(NamedTuple):
    """A train/test pair of observation matrices and what they are.

    Attributes:
      name: "olivetti", "nips", "mnist", "omniglot", or the stem of a generic file.
      train: (N, D) float32 observations: counts (Poisson) or values in {0, 1} (Bernoulli).
      test: (N_test, D) float32 observations, same columns as ``train``.
      likelihood: "poisson" or "bernoulli".
      image_shape: (height, width) of each row for image data, None for bag of words.
      heldout_entries: True when the test rows are the *same* rows as train, holding out
        entries (NIPS: held-out word tokens of each document); False when the test rows are
        new observations (images).
      info: JSON-serialisable provenance: source file, format, split, seed, and so on.
    """

    name: str
    train: np.ndarray
    test: np.ndarray
    likelihood: str
    image_shape: tuple[int, int] | None
    heldout_entries: bool
    info: dict


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$GREPVI_DATA_DIR``.

    Raises :class:`DataError` when neither is set, or when the directory does not exist.
    """
    if data_dir is not None and str(data_dir) != "":
        source = "--data-dir"
    else:
        data_dir = os.environ.get(DATA_DIR_ENVIRONMENT_VARIABLE, "")
        source = f"environment variable {DATA_DIR_ENVIRONMENT_VARIABLE}"
        if not data_dir:
            raise DataError(
                "data directory: expected --data-dir (data_dir=...) or the environment variable "
                f"{DATA_DIR_ENVIRONMENT_VARIABLE} to name the folder holding the data files, "
                "found neither set"
            )
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        found = "a file" if path.exists() else "nothing"
        raise DataError(
            f"data directory {str(path)!r} (from {source}): expected an existing folder, "
            f"found {found} there; pass --data-dir or set {DATA_DIR_ENVIRONMENT_VARIABLE}"
        )
    return path


def find_data_file(
    dataset_name: str, file_names: tuple[str, ...], data_dir: str | os.PathLike | None
) -> Path:
    """The first of ``file_names`` present in the data directory.

    Raises :class:`DataError` naming the directory and every file looked for.
    """
    directory = resolve_data_dir(data_dir)
    for file_name in file_names:
        if (directory / file_name).is_file():
            return directory / file_name
    raise DataError(
        f"data set {dataset_name!r}: expected one of the files {', '.join(file_names)} in the "
        f"data directory {str(directory)!r}, found none; point --data-dir or "
        f"{DATA_DIR_ENVIRONMENT_VARIABLE} at the folder that holds them"
    )


def resolve_file(path: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Path:
    """``path`` itself if it is a file (absolute or relative to the working directory), else
    ``path`` relative to the data directory.

    Raises :class:`DataError` naming every place looked in.
    """
    candidate = Path(path).expanduser()
    if candidate.is_file():
        return candidate
    looked = [str(candidate.resolve())]
    if not candidate.is_absolute():
        try:
            directory = resolve_data_dir(data_dir)
        except DataError:
            directory = None
        if directory is not None:
            in_directory = directory / candidate
            if in_directory.is_file():
                return in_directory
            looked.append(str(in_directory))
    raise DataError(
        f"data file {str(path)!r}: expected an existing file, found none at "
        f"{' or '.join(looked)}; a relative path is looked up in the working directory, then in "
        f"the data directory given by --data-dir or {DATA_DIR_ENVIRONMENT_VARIABLE}"
    )


def make_dataset(
    name: str,
    train: np.ndarray,
    test: np.ndarray,
    likelihood: str,
    image_shape: tuple[int, int] | None,
    heldout_entries: bool,
    info: dict,
) -> Dataset:
    """Check and assemble a :class:`Dataset`; observations become C-contiguous float32.

    Raises :class:`DataError` for an empty side, differing column counts, a row size that
    does not match ``image_shape``, or values outside the likelihood's support.
    """
    likelihood = check_likelihood(likelihood)
    train = check_matrix(train, f"{name} train data")
    test = check_matrix(test, f"{name} test data")
    if train.shape[1] != test.shape[1]:
        raise DataError(
            f"{name}: expected train and test data with the same number of columns, "
            f"found {train.shape[1]} and {test.shape[1]}"
        )
    if heldout_entries and train.shape != test.shape:
        raise DataError(
            f"{name}: held-out entries need train and test of the same shape, "
            f"found {train.shape} and {test.shape}"
        )
    if image_shape is not None:
        image_shape = (int(image_shape[0]), int(image_shape[1]))
        if image_shape[0] * image_shape[1] != train.shape[1]:
            raise DataError(
                f"{name}: expected {image_shape[0]}x{image_shape[1]} = "
                f"{image_shape[0] * image_shape[1]} columns for the image shape, "
                f"found {train.shape[1]}"
            )
    check_values(train, likelihood, f"{name} train data")
    check_values(test, likelihood, f"{name} test data")
    return Dataset(
        name=name,
        train=np.ascontiguousarray(train, dtype=np.float32),
        test=np.ascontiguousarray(test, dtype=np.float32),
        likelihood=likelihood,
        image_shape=image_shape,
        heldout_entries=bool(heldout_entries),
        info=info,
    )

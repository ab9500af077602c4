"""Data sets of Ruiz, Titsias & Blei (2016, "The Generalized Reparameterization Gradient").

The experiments fit the sparse gamma DEF to Olivetti faces and NIPS 2011 bag of words (Poisson
counts), and beta-gamma matrix factorization to binarized MNIST and Omniglot (binary).
:func:`load_dataset` returns any of them, or any supported file, as a :class:`Dataset`.
"""

import os

from grepvi.data.dataset import (
    DATA_DIR_ENVIRONMENT_VARIABLE,
    DATASET_NAMES,
    Dataset,
    resolve_data_dir,
    resolve_file,
)
from grepvi.data.generic import FILE_FORMATS, load_arrays, load_file
from grepvi.data.mnist import load_mnist
from grepvi.data.nips import load_docword, load_nips
from grepvi.data.olivetti import load_olivetti
from grepvi.data.omniglot import DEFAULT_ALPHABETS, load_omniglot
from grepvi.data.validation import check_options, check_seed
from grepvi.errors import DataError

__all__ = [
    "Dataset",
    "DATASET_NAMES",
    "DATA_DIR_ENVIRONMENT_VARIABLE",
    "DEFAULT_ALPHABETS",
    "FILE_FORMATS",
    "load_dataset",
    "resolve_data_dir",
    "load_olivetti",
    "load_nips",
    "load_docword",
    "load_mnist",
    "load_omniglot",
    "load_arrays",
    "load_file",
]

_LOADERS = {
    "olivetti": load_olivetti,
    "nips": load_nips,
    "mnist": load_mnist,
    "omniglot": load_omniglot,
}


def load_dataset(
    name_or_path: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    **options,
) -> Dataset:
    """One of :data:`DATASET_NAMES` from the data directory, or else the file ``name_or_path``.

    Args:
      name_or_path: "olivetti", "nips", "mnist", "omniglot", or a path to a file (relative to
        the working directory or to the data directory) in one of :data:`FILE_FORMATS`.
      data_dir: the data directory (``--data-dir``); None for ``$GREPVI_DATA_DIR``.
      seed: seed of any random split or subsample.
      **options: loader options, e.g. ``split="random"`` and ``test_fraction`` (nips),
        ``num_train`` / ``num_test`` (mnist), ``alphabets`` (omniglot), ``likelihood`` (generic).

    Raises:
      DataError: unknown name, missing or malformed file, values the likelihood cannot take,
        or an empty or overlapping split.

    Examples:
      >>> import os
      >>> from grepvi.data import load_dataset
      >>> if os.environ.get("GREPVI_DATA_DIR"):  # doctest: +SKIP
      ...     faces = load_dataset("olivetti")
      ...     faces.train.shape, faces.test.shape
      ((320, 4096), (80, 4096))
    """
    seed = check_seed(seed)
    key = os.fspath(name_or_path)
    if key.lower() in _LOADERS:
        loader = _LOADERS[key.lower()]
        check_options(loader, options, f"data set {key.lower()!r}")
        return loader(data_dir, seed=seed, **options)
    looks_like_path = os.sep in key or "/" in key or "." in os.path.basename(key)
    try:
        path = resolve_file(key, data_dir)
    except DataError:
        if looks_like_path:
            raise
        raise DataError(
            f"data set {key!r}: expected one of {', '.join(DATASET_NAMES)} or a path to a data "
            f"file ({', '.join(FILE_FORMATS)}), found an unknown name (and no such file)"
        ) from None
    return load_file(path, data_dir, seed=seed, **options)

"""Data from any file: a generic ``.npz`` / ``.mat`` of arrays, or an original-format file.

A generic file holds either ``images`` (n, height, width) or ``counts`` (n, d), and optionally
a test set (``test_images`` / ``test_counts``) or a split (``train_idx`` / ``test_idx``,
0-based row indices; one of them suffices, the other side is the rest). Without either, a
seeded 80/20 split: the first 20% of ``np.random.default_rng(seed).permutation(n)`` is test.
The likelihood is given, or inferred: all values in {0, 1} gives "bernoulli", non-negative
integers give "poisson". Test rows are new observations (``heldout_entries`` False).

:func:`load_file` recognises the original formats of the paper's data sets (Ruiz, Titsias &
Blei 2016, experiments section) by name, extension or content, and hands them to their loader:
the Olivetti ``.mat``, MNIST IDX files, Omniglot zips of PNGs, UCI ``docword`` files.
"""

import gzip
import inspect
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from grepvi.data.dataset import Dataset, make_dataset, resolve_file
from grepvi.data.mnist import IDX_IMAGES_MAGIC, MNIST_FILES, load_mnist
from grepvi.data.nips import NIPS_FILE, load_docword, load_nips
from grepvi.data.olivetti import OLIVETTI_FILES, load_olivetti
from grepvi.data.omniglot import OMNIGLOT_FILE, OMNIGLOT_ZIP_FILES, load_omniglot
from grepvi.data.validation import (
    check_fraction,
    check_image_stack,
    check_likelihood,
    check_matrix,
    check_options,
    check_split,
    check_values,
    infer_likelihood,
    read_mat,
    read_npz,
)
from grepvi.errors import DataError

__all__ = [
    "FILE_FORMATS",
    "DEFAULT_TEST_FRACTION",
    "detect_format",
    "load_arrays",
    "file_stem",
    "load_file",
]

FILE_FORMATS = ("npz", "mat", "idx", "zip", "docword")
DEFAULT_TEST_FRACTION = 0.2

_ARRAY_NAMES = ("images", "counts", "test_images", "test_counts", "train_idx", "test_idx")
_CANONICAL_FILES = {
    **{name: "olivetti" for name in OLIVETTI_FILES},
    **{name: "mnist" for name in MNIST_FILES},
    **{name: "omniglot" for name in (OMNIGLOT_FILE, *OMNIGLOT_ZIP_FILES)},
    NIPS_FILE: "nips",
}


def detect_format(path: str | os.PathLike) -> str:
    """One of :data:`FILE_FORMATS`, from the file's name, else from its first bytes."""
    path = Path(path)
    name = path.name.lower()
    by_suffix = {".npz": "npz", ".mat": "mat", ".zip": "zip"}
    if path.suffix.lower() in by_suffix:
        return by_suffix[path.suffix.lower()]
    if "idx3" in name:
        return "idx"
    if name.startswith("docword"):
        return "docword"
    with open(path, "rb") as file:
        head = file.read(128)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as file:
                head = file.read(128)
        except (EOFError, OSError, zlib.error) as error:
            raise DataError(f"{path}: not a valid gzip file (it is truncated or corrupt: {error})") from error
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                members = archive.namelist()
        except zipfile.BadZipFile as error:
            raise DataError(f"{path}: starts like a zip file but is not a valid one") from error
        return "npz" if members and all(m.endswith(".npy") for m in members) else "zip"
    if head.startswith(b"MATLAB"):
        return "mat"
    if len(head) >= 4 and int.from_bytes(head[:4], "big") == IDX_IMAGES_MAGIC:
        return "idx"
    if head[:1].isdigit():
        return "docword"
    raise DataError(
        f"{path}: expected a data file of a known format ({', '.join(FILE_FORMATS)}: .npz, "
        ".mat, IDX images, a zip of Omniglot PNGs, a UCI docword file), found none of them"
    )


def _first_present(arrays: dict, names: tuple[str, str], path) -> tuple[str, np.ndarray] | None:
    present = [name for name in names if name in arrays]
    if len(present) > 1:
        raise DataError(f"{path}: expected one of the arrays {' or '.join(names)}, found both")
    return (present[0], np.asarray(arrays[present[0]])) if present else None


def _as_rows(name: str, values: np.ndarray, path) -> tuple[np.ndarray, tuple[int, int] | None]:
    argument = f"{path} (array {name})"
    if name.endswith("images"):
        images = check_image_stack(values, argument)
        return images.reshape(images.shape[0], -1), images.shape[1:]
    return check_matrix(values, argument), None


def load_arrays(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    likelihood: str | None = None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> Dataset:
    """A generic ``.npz`` or ``.mat`` file of ``images`` or ``counts`` (see the module doc).

    Args:
      path: the file.
      seed: seed of the 80/20 split, used when the file has no split of its own.
      likelihood: "poisson" or "bernoulli"; inferred from the values when None.
      test_fraction: share of rows drawn for test when the file has no split.
    """
    path = Path(path)
    if detect_format(path) == "mat":
        variables = read_mat(path)
        arrays = {name: variables[name] for name in _ARRAY_NAMES if name in variables}
        if not ({"images", "counts"} & set(arrays)):
            raise DataError(
                f"{path}: missing variable images or counts in the .mat file; expected images "
                f"(n, height, width) or counts (n, d), found "
                f"{', '.join(sorted(variables)) or 'none'}"
            )
        for name in ("train_idx", "test_idx"):
            if name in arrays:
                arrays[name] = np.asarray(arrays[name]).ravel()
    else:
        arrays = read_npz(path, (), _ARRAY_NAMES)
        if not ({"images", "counts"} & set(arrays)):
            with np.load(path, allow_pickle=False) as archive:
                found = ", ".join(sorted(archive.files)) or "none"
            raise DataError(
                f"{path}: missing array images or counts in the .npz file; expected images "
                f"(n, height, width) or counts (n, d), found {found}"
            )
    name, values = _first_present(arrays, ("images", "counts"), path)
    train, image_shape = _as_rows(name, values, path)
    test_entry = _first_present(arrays, ("test_images", "test_counts"), path)
    given_indices = {key: arrays[key] for key in ("train_idx", "test_idx") if key in arrays}
    if test_entry is not None and given_indices:
        raise DataError(
            f"{path}: expected either a test array ({test_entry[0]}) or split indices "
            f"({', '.join(given_indices)}), found both"
        )
    if test_entry is not None:
        test_name, test_values = test_entry
        if test_name.endswith("images") != name.endswith("images"):
            raise DataError(f"{path}: expected {name} with test_{name}, found {name} with {test_name}")
        test, test_image_shape = _as_rows(test_name, test_values, path)
        if test_image_shape != image_shape or test.shape[1] != train.shape[1]:
            raise DataError(
                f"{path}: expected {test_name} rows shaped like {name} rows "
                f"({image_shape or train.shape[1]}), found images with inconsistent shapes: "
                f"{test_image_shape or test.shape[1]}"
            )
        split = f"{name} train, {test_name} test (from the file)"
    else:
        num_rows = train.shape[0]
        if given_indices:
            all_rows = np.arange(num_rows)
            train_indices = given_indices.get("train_idx")
            test_indices = given_indices.get("test_idx")
            if train_indices is None:
                train_indices = np.setdiff1d(all_rows, test_indices)
            if test_indices is None:
                test_indices = np.setdiff1d(all_rows, train_indices)
            split = f"{', '.join(given_indices)} from the file"
        else:
            test_fraction = check_fraction(test_fraction, "test_fraction")
            num_test = int(round(test_fraction * num_rows))
            if num_rows < 2 or not 0 < num_test < num_rows:
                raise DataError(
                    f"{path}: expected enough rows for a {test_fraction:.0%} test split with at "
                    f"least one row on each side, found {num_rows} row(s)"
                )
            permutation = np.random.default_rng(seed).permutation(num_rows)
            test_indices, train_indices = permutation[:num_test], permutation[num_test:]
            split = (
                f"random: first {num_test} of np.random.default_rng({seed})."
                f"permutation({num_rows}) test, the rest train"
            )
        train_indices, test_indices = check_split(
            np.asarray(train_indices), np.asarray(test_indices), num_rows, f"{path} (split)"
        )
        train, test = train[train_indices], train[test_indices]
    if likelihood is None:
        likelihood = infer_likelihood(np.concatenate([train, test]), f"{path} (array {name})")
        likelihood_source = "inferred from the values"
    else:
        likelihood = check_likelihood(likelihood)
        check_values(train, likelihood, f"{path} (array {name})")
        likelihood_source = "given"
    info = {
        "source": str(path),
        "format": path.suffix.lower().lstrip("."),
        "split": split,
        "likelihood": likelihood_source,
        "seed": int(seed),
    }
    return make_dataset(path.stem, train, test, likelihood, image_shape, False, info)


_DATASET_LOADERS = {
    "olivetti": load_olivetti,
    "mnist": load_mnist,
    "omniglot": load_omniglot,
    "nips": load_nips,
}
_FORMAT_LOADERS = {
    "npz": load_arrays,
    "idx": load_mnist,
    "zip": load_omniglot,
    "docword": load_docword,
}


def file_stem(path: str | os.PathLike) -> str:
    """The file name without ``.gz`` and without its last suffix: ``docword.nips.txt.gz`` ->
    ``docword.nips``."""
    name = Path(path).name
    name = name[:-3] if name.lower().endswith(".gz") else name
    return Path(name).stem


def load_file(
    path: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    **options,
) -> Dataset:
    """Load a data file of any supported format; ``path`` may be relative to ``data_dir``.

    The four data sets' own files (``olivetti_faces.npz``, ``olivettifaces.mat``,
    ``mnist_t10k.npz``, ``t10k-images-idx3-ubyte[.gz]``, ``omniglot_105.npz``,
    ``images_background.zip``, ``images_evaluation.zip``, ``nips2011_bow.npz``) go to their
    loader and keep the data set's name. Any other file is named by :func:`file_stem`: a
    ``.mat`` with the variable ``faces`` loads like Olivetti, other ``.npz`` and ``.mat`` files
    are generic (:func:`load_arrays`), IDX image files load like MNIST, zips like Omniglot,
    ``docword`` files like NIPS with a random split.

    ``likelihood=`` ("poisson" or "bernoulli") validates a generic file's values against it
    (instead of inferring it) and checks any other file's data set against it.
    """
    path = resolve_file(path, data_dir)
    canonical = _CANONICAL_FILES.get(path.name)
    if canonical is not None:
        loader = _DATASET_LOADERS[canonical]
        label = f"data set {canonical!r} (file {path})"
    else:
        file_format = detect_format(path)
        if file_format == "mat":
            loader = load_olivetti if "faces" in read_mat(path) else load_arrays
        else:
            loader = _FORMAT_LOADERS[file_format]
        label = f"the {file_format} file {path}"
    wanted = options.get("likelihood")
    if wanted is not None and "likelihood" not in inspect.signature(loader).parameters:
        # Loaders of one data set's own format know their likelihood; check it after loading.
        options = {key: value for key, value in options.items() if key != "likelihood"}
    check_options(loader, options, label)
    dataset = loader(path=path, seed=seed, **options)
    if wanted is not None and dataset.likelihood != check_likelihood(wanted):
        raise DataError(f"{label}: expected {wanted} data, found {dataset.likelihood} data")
    return dataset._replace(name=canonical or file_stem(path))

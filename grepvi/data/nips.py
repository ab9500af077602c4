"""Bag-of-words corpora with held-out word tokens: NIPS 2011 and UCI ``docword`` files.

Ruiz, Titsias & Blei (2016, experiments section) fit the sparse gamma DEF to the NIPS 2011
papers, 305 documents by 5715 words, as Poisson counts. Test data are held-out word tokens of
the *same* documents, so ``train`` and ``test`` are both (documents, words) and
``heldout_entries`` is True.

Sources (see ``PROVENANCE.md`` of the data folder):

* ``nips2011_bow.npz``: triplets ``doc``, ``word``, ``count`` (train + test), with the source's
  own per-token split ``count_train`` / ``count_test`` (20% test; ``nips_train.csv`` /
  ``nips_test.csv`` of ``blei-lab/ars-reparameterization``), and ``shape`` [305, 5715].
* a UCI bag-of-words file ``docword.NAME.txt`` (raw or gzipped; Dua & Graff, UCI Machine
  Learning Repository, "Bag of Words"): three header lines D, W, NNZ, then NNZ lines
  ``doc word count`` with 1-based indices; words in ``vocab.NAME.txt``, one a line.

A random split sends each token of each document to test independently with probability
``test_fraction``: binomial thinning of every count with ``np.random.default_rng(seed)``.
"""

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from grepvi.data.dataset import Dataset, find_data_file, make_dataset
from grepvi.data.validation import check_counts, check_fraction, read_npz
from grepvi.errors import DataError

__all__ = [
    "NIPS_FILE",
    "SPLITS",
    "DEFAULT_TEST_FRACTION",
    "split_tokens",
    "triplets_to_matrix",
    "read_docword",
    "load_nips",
    "load_docword",
]

NIPS_FILE = "nips2011_bow.npz"
SPLITS = ("source", "random")
DEFAULT_TEST_FRACTION = 0.25


def split_tokens(counts: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Send each token to test with probability ``test_fraction``; return (train, test) counts."""
    counts = np.asarray(counts, dtype=np.int64)
    test = np.random.default_rng(seed).binomial(counts, test_fraction)
    return counts - test, test


def triplets_to_matrix(
    doc: np.ndarray, word: np.ndarray, count: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """Dense (documents, words) float32 matrix from 0-based triplets; repeats are summed."""
    flat_index = np.asarray(doc, dtype=np.int64) * shape[1] + np.asarray(word, dtype=np.int64)
    totals = np.bincount(flat_index, weights=count, minlength=shape[0] * shape[1])
    return totals.reshape(shape).astype(np.float32)


def _check_triplets(doc, word, counts: dict, shape, source) -> tuple[int, int]:
    shape = np.asarray(shape).ravel()
    if shape.size != 2 or not np.issubdtype(shape.dtype, np.integer) or (shape < 1).any():
        raise DataError(
            f"{source} (shape): expected two positive integers (documents, words), found {shape.tolist()}"
        )
    num_docs, num_words = int(shape[0]), int(shape[1])
    length = np.shape(doc)
    for name, values in (("word", word), *counts.items()):
        if np.shape(values) != length:
            raise DataError(
                f"{source} (array {name}): expected one entry per triplet, shape {length}, "
                f"found shape {np.shape(values)}"
            )
    for name, values, size in (("doc", doc, num_docs), ("word", word, num_words)):
        values = np.asarray(values)
        if not np.issubdtype(values.dtype, np.integer):
            raise DataError(f"{source} (array {name}): expected integer indices, found dtype {values.dtype}")
        if values.size and (values.min() < 0 or values.max() >= size):
            raise DataError(
                f"{source} (array {name}): expected indices in [0, {size}), found range "
                f"{values.min()}..{values.max()}"
            )
    for name, values in counts.items():
        check_counts(values, f"{source} (array {name})")
    return num_docs, num_words


def _check_nonempty(train: np.ndarray, test: np.ndarray, source) -> None:
    for side, matrix in (("train", train), ("test", test)):
        if not matrix.any():
            raise DataError(
                f"{source}: expected held-out word tokens on both sides, found an empty "
                f"{side} split (no {side} tokens at all)"
            )


def load_nips(
    data_dir: str | os.PathLike | None = None,
    *,
    path: str | os.PathLike | None = None,
    seed: int = 0,
    split: str = "source",
    test_fraction: float | None = None,
) -> Dataset:
    """NIPS 2011 bag of words, 305 x 5715 counts, train and test tokens of the same documents.

    Args:
      data_dir: folder holding ``nips2011_bow.npz``.
      path: read this file instead.
      seed: seed of the random split (recorded, unused, for the source split).
      split: "source" for the file's own 20% held-out tokens, "random" for binomial thinning.
      test_fraction: probability that a token is held out, for ``split="random"`` only
        (default 0.25).
    """
    if split not in SPLITS:
        raise DataError(f"split: expected one of {', '.join(SPLITS)}, found {split!r}")
    if split == "source" and test_fraction is not None:
        raise DataError(
            f"test_fraction: applies to split='random' only, found test_fraction={test_fraction} "
            "with split='source' (the file's own split)"
        )
    source = Path(path) if path is not None else find_data_file("nips", (NIPS_FILE,), data_dir)
    arrays = read_npz(source, ("doc", "word", "count", "count_train", "count_test", "shape"))
    counts = {name: arrays[name] for name in ("count", "count_train", "count_test")}
    shape = _check_triplets(arrays["doc"], arrays["word"], counts, arrays["shape"], source)
    if split == "source":
        mismatch = counts["count_train"] + counts["count_test"] != counts["count"]
        if mismatch.any():
            raise DataError(
                f"{source}: expected count_train + count_test == count for every triplet, "
                f"found {int(mismatch.sum())} triplet(s) where they differ"
            )
        train_counts, test_counts = counts["count_train"], counts["count_test"]
        description = "source: the file's own per-token split (count_train / count_test)"
    else:
        test_fraction = check_fraction(
            DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction, "test_fraction"
        )
        train_counts, test_counts = split_tokens(counts["count"], test_fraction, seed)
        description = (
            f"random: each token to test with probability {test_fraction} "
            f"(binomial thinning, np.random.default_rng({seed}))"
        )
    train = triplets_to_matrix(arrays["doc"], arrays["word"], train_counts, shape)
    test = triplets_to_matrix(arrays["doc"], arrays["word"], test_counts, shape)
    _check_nonempty(train, test, source)
    info = {
        "source": str(source),
        "format": "npz",
        "split": description,
        "test_fraction": None if test_fraction is None else float(test_fraction),
        "seed": int(seed),
        "vocabulary": None,
        "vocabulary_note": "the source has no word list (vocab holds placeholders w0000..)",
    }
    return make_dataset("nips", train, test, "poisson", None, True, info)


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as file:
            gzipped = file.read(2) == b"\x1f\x8b"
        if gzipped:
            with gzip.open(path, "rb") as file:
                content = file.read()
        else:
            content = path.read_bytes()
        return content.decode("ascii")
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as error:
        raise DataError(
            f"{path}: expected a plain or gzipped ASCII text file; it is truncated or of "
            f"another format: {error}"
        ) from error


def read_docword(path: str | os.PathLike) -> tuple[np.ndarray, tuple[int, int]]:
    """The 0-based (NNZ, 3) triplets ``doc, word, count`` and the shape (D, W) of a docword file."""
    path = Path(path)
    tokens = _read_text(path).split()
    try:
        values = np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError) as error:
        raise DataError(
            f"{path}: expected only integers in a docword file (D, W, NNZ, then "
            f"'doc word count' lines), found a non-integer: {error}"
        ) from error
    if values.size < 3:
        raise DataError(
            f"{path}: expected a docword header of three lines D, W, NNZ, found {values.size} value(s)"
        )
    num_docs, num_words, num_nonzero = (int(v) for v in values[:3])
    body = values[3:]
    if body.size != 3 * num_nonzero:
        raise DataError(
            f"{path}: expected NNZ = {num_nonzero} triplets ({3 * num_nonzero} values) after the "
            f"header, found {body.size} values (the file is truncated or its header is wrong)"
        )
    triplets = body.reshape(num_nonzero, 3) - np.array([1, 1, 0])
    counts = {"count": triplets[:, 2]}
    _check_triplets(triplets[:, 0], triplets[:, 1], counts, np.array([num_docs, num_words]), path)
    return triplets, (num_docs, num_words)


def _docword_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".txt"):
        name = name[: -len(suffix)] if name.lower().endswith(suffix) else name
    return name


def _read_vocabulary(path: Path, num_words: int) -> list[str]:
    words = _read_text(path).splitlines()
    words = [word.strip() for word in words if word.strip()]
    if len(words) != num_words:
        raise DataError(
            f"{path}: expected {num_words} words (W of the docword file), one a line, found {len(words)}"
        )
    return words


def load_docword(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    vocabulary_path: str | os.PathLike | None = None,
) -> Dataset:
    """A UCI docword corpus split at random into train and held-out word tokens.

    Args:
      path: the ``docword.NAME.txt`` file, raw or gzipped.
      seed: seed of the random split.
      test_fraction: probability that a token is held out.
      vocabulary_path: word list; by default ``vocab.NAME.txt`` beside ``path`` if present.
    """
    path = Path(path)
    test_fraction = check_fraction(test_fraction, "test_fraction")
    triplets, shape = read_docword(path)
    name = _docword_name(path)
    if vocabulary_path is None:
        default = path.with_name("vocab." + name.removeprefix("docword.") + ".txt")
        vocabulary_path = default if default.is_file() else None
    vocabulary = None
    if vocabulary_path is not None:
        vocabulary = _read_vocabulary(Path(vocabulary_path), shape[1])
    train_counts, test_counts = split_tokens(triplets[:, 2], test_fraction, seed)
    train = triplets_to_matrix(triplets[:, 0], triplets[:, 1], train_counts, shape)
    test = triplets_to_matrix(triplets[:, 0], triplets[:, 1], test_counts, shape)
    _check_nonempty(train, test, path)
    info = {
        "source": str(path),
        "format": "docword",
        "split": (
            f"random: each token to test with probability {test_fraction} "
            f"(binomial thinning, np.random.default_rng({seed}))"
        ),
        "test_fraction": test_fraction,
        "seed": int(seed),
        "vocabulary": vocabulary,
        "vocabulary_source": None if vocabulary_path is None else str(vocabulary_path),
    }
    return make_dataset(name, train, test, "poisson", None, True, info)

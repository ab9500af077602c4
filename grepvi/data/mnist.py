"""Binarized MNIST: 28x28 handwritten digits, pixel > 127 becomes 1, for a Bernoulli likelihood.

Ruiz, Titsias & Blei (2016, experiments section) fit beta-gamma matrix factorization to
binarized MNIST with 5000 training and 2000 test images. Only the official 10k *test* images are
at hand (see ``PROVENANCE.md`` of the data folder), so both subsets are drawn, disjoint, from
them: a permutation from ``np.random.default_rng(seed)``, its first ``num_train`` entries for
training and the next ``num_test`` for testing.

Sources:

* ``mnist_t10k.npz``: ``images`` uint8 (10000, 28, 28), grey levels 0..255.
* the original IDX file ``t10k-images-idx3-ubyte`` (raw or gzipped): a big-endian header,
  magic 0x00000803 (unsigned bytes, 3 dimensions), then the three sizes as int32, then the
  pixels (LeCun, Cortes & Burges, http://yann.lecun.com/exdb/mnist/).
"""

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from grepvi.data.dataset import Dataset, find_data_file, make_dataset
from grepvi.data.validation import check_image_stack, check_positive_int, read_npz
from grepvi.errors import DataError

__all__ = [
    "MNIST_FILES",
    "IDX_IMAGES_MAGIC",
    "BINARIZE_THRESHOLD",
    "read_idx_images",
    "binarize",
    "load_mnist",
]

MNIST_FILES = (
    "mnist_t10k.npz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-images-idx3-ubyte",
    "t10k-images.idx3-ubyte",
)
IDX_IMAGES_MAGIC = 0x00000803
BINARIZE_THRESHOLD = 127
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: Path) -> bytes:
    with open(path, "rb") as file:
        head = file.read(2)
    if head != _GZIP_MAGIC:
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as file:
            return file.read()
    except (EOFError, OSError, zlib.error) as error:
        raise DataError(
            f"{path}: not a valid gzip file (expected a complete gzipped IDX file; it is "
            f"truncated or corrupt: {error})"
        ) from error


def read_idx_images(path: str | os.PathLike) -> np.ndarray:
    """The uint8 images (n, rows, columns) of an IDX3 file, raw or gzipped."""
    path = Path(path)
    content = _read_bytes(path)
    if len(content) < 16:
        raise DataError(
            f"{path}: expected an IDX image file with a 16-byte header, found {len(content)} "
            "byte(s) (truncated or another format)"
        )
    magic = int.from_bytes(content[:4], "big")
    if magic != IDX_IMAGES_MAGIC:
        raise DataError(
            f"{path}: expected the IDX magic number 0x{IDX_IMAGES_MAGIC:08x} (unsigned bytes, "
            f"3 dimensions), found 0x{magic:08x}; not an IDX image file"
        )
    shape = tuple(int(size) for size in np.frombuffer(content, dtype=">i4", count=3, offset=4))
    expected = 16 + int(np.prod(shape))
    if len(content) != expected:
        what = "is truncated" if len(content) < expected else "has trailing bytes"
        raise DataError(
            f"{path}: expected {expected} bytes for an IDX file of shape {shape}, found "
            f"{len(content)} (the file {what})"
        )
    return np.frombuffer(content, dtype=np.uint8, offset=16).reshape(shape)


def binarize(images: np.ndarray, threshold: int = BINARIZE_THRESHOLD) -> np.ndarray:
    """1 where a grey level exceeds ``threshold``, else 0 (uint8)."""
    return (np.asarray(images) > threshold).astype(np.uint8)


def load_mnist(
    data_dir: str | os.PathLike | None = None,
    *,
    path: str | os.PathLike | None = None,
    seed: int = 0,
    num_train: int = 5000,
    num_test: int = 2000,
) -> Dataset:
    """Binarized MNIST: ``num_train`` train and ``num_test`` disjoint test images, seeded.

    Args:
      data_dir: folder holding ``mnist_t10k.npz`` or ``t10k-images-idx3-ubyte[.gz]``.
      path: read this file instead (``.npz`` with ``images``, or IDX, raw or gzipped).
      seed: seed of the permutation that draws both subsets.
      num_train: number of training images.
      num_test: number of test images.
    """
    source = Path(path) if path is not None else find_data_file("mnist", MNIST_FILES, data_dir)
    if source.suffix.lower() == ".npz":
        images = read_npz(source, ("images",))["images"]
        argument = f"{source} (array images)"
        file_format = "npz"
    else:
        images = read_idx_images(source)
        argument = str(source)
        file_format = "idx"
    images = check_image_stack(images, argument)
    num_train = check_positive_int(num_train, "num_train")
    num_test = check_positive_int(num_test, "num_test")
    num_images = images.shape[0]
    if num_train + num_test > num_images:
        raise DataError(
            f"num_train + num_test: expected at most the {num_images} images of {source}, "
            f"found {num_train} + {num_test} = {num_train + num_test}"
        )
    if not np.issubdtype(images.dtype, np.number) or images.min() < 0 or images.max() > 255:
        raise DataError(
            f"{argument}: expected grey levels 0..255, found dtype {images.dtype} with "
            f"range {images.min()}..{images.max()}"
        )
    permutation = np.random.default_rng(seed).permutation(num_images)
    train_indices = permutation[:num_train]
    test_indices = permutation[num_train : num_train + num_test]
    flat = binarize(images.reshape(num_images, -1))
    info = {
        "source": str(source),
        "format": file_format,
        "split": (
            f"np.random.default_rng({seed}).permutation({num_images}): first {num_train} "
            f"train, next {num_test} test"
        ),
        "binarization": f"pixel > {BINARIZE_THRESHOLD} -> 1",
        "num_images": int(num_images),
        "seed": int(seed),
    }
    return make_dataset(
        "mnist",
        flat[train_indices],
        flat[test_indices],
        "bernoulli",
        images.shape[1:],
        False,
        info,
    )

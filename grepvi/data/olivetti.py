"""Olivetti faces: 400 grey-level 64x64 images of 40 people, pixel values as Poisson counts.

Ruiz, Titsias & Blei (2016, experiments section) fit the sparse gamma DEF to the Olivetti
faces, treating each pixel's grey level (0..255; 0..242 in this data) as a Poisson count. The
split is that of the sparse gamma DEF code in ``blei-lab/ars-reparameterization`` (Naesseth,
Ruiz, Linderman & Blei 2017, ``faces_test.csv``): images 8 and 9 of every person are the 80
test faces, the other 320 are the training faces.

Sources (see ``PROVENANCE.md`` of the data folder):

* ``olivetti_faces.npz``: ``images`` uint8 (400, 64, 64), ``subject`` (400,), and
  ``ars_test_idx`` (80,), the indices of the test faces.
* ``olivettifaces.mat`` (Sam Roweis's MAT v5 file): ``faces`` uint8 (4096, 400), each column a
  column-major 64x64 image, so ``images = faces.T.reshape(400, 64, 64).transpose(0, 2, 1)``
  (the convention of scikit-learn's ``fetch_olivetti_faces``).
"""

import os
from pathlib import Path

import numpy as np

from grepvi.data.dataset import Dataset, find_data_file, make_dataset
from grepvi.data.validation import check_counts, check_image_stack, check_split, read_mat, read_npz
from grepvi.errors import DataError

__all__ = [
    "OLIVETTI_FILES",
    "IMAGES_PER_SUBJECT",
    "TEST_IMAGES_OF_SUBJECT",
    "read_olivetti_mat",
    "load_olivetti",
]

OLIVETTI_FILES = ("olivetti_faces.npz", "olivettifaces.mat")
IMAGES_PER_SUBJECT = 10
TEST_IMAGES_OF_SUBJECT = (8, 9)


def read_olivetti_mat(path: str | os.PathLike) -> np.ndarray:
    """The face images of ``olivettifaces.mat``, as (n, 64, 64) with upright faces.

    The variable ``faces`` holds one column-major square image per column.
    """
    variables = read_mat(path)
    if "faces" not in variables:
        raise DataError(
            f"{path}: missing variable faces in the .mat file; expected faces (4096, 400), "
            f"found {', '.join(sorted(variables)) or 'none'}"
        )
    faces = np.asarray(variables["faces"])
    side = int(round(np.sqrt(faces.shape[0]))) if faces.ndim == 2 else 0
    if faces.ndim != 2 or side * side != faces.shape[0] or faces.shape[1] == 0:
        raise DataError(
            f"{path}: expected variable faces of shape (side*side, n), one square image per "
            f"column, found shape {faces.shape}"
        )
    return faces.T.reshape(faces.shape[1], side, side).transpose(0, 2, 1)


def _test_indices_by_subject(num_images: int, argument: str) -> np.ndarray:
    if num_images % IMAGES_PER_SUBJECT:
        raise DataError(
            f"{argument}: expected runs of {IMAGES_PER_SUBJECT} images per person, found "
            f"{num_images} images (not a multiple of {IMAGES_PER_SUBJECT})"
        )
    starts = np.arange(0, num_images, IMAGES_PER_SUBJECT)
    return (starts[:, None] + np.asarray(TEST_IMAGES_OF_SUBJECT)[None, :]).ravel()


def load_olivetti(
    data_dir: str | os.PathLike | None = None,
    *,
    path: str | os.PathLike | None = None,
    seed: int = 0,
) -> Dataset:
    """Olivetti faces, 320 train / 80 test, 4096 pixel counts per face.

    Args:
      data_dir: folder holding ``olivetti_faces.npz`` or ``olivettifaces.mat``.
      path: read this file instead (``.npz`` or ``.mat``).
      seed: unused (the split is fixed); recorded in ``info``.
    """
    if path is not None:
        source = Path(path)
    else:
        source = find_data_file("olivetti", OLIVETTI_FILES, data_dir)
    if source.suffix.lower() == ".mat":
        images = read_olivetti_mat(source)
        argument = f"{source} (variable faces)"
        test_indices = _test_indices_by_subject(images.shape[0], argument)
        split = "images 8 and 9 of each person (indices 10*s+8, 10*s+9) are test"
        file_format = "mat"
    else:
        arrays = read_npz(source, ("images", "ars_test_idx"), ("subject",))
        images = arrays["images"]
        argument = f"{source} (array images)"
        test_indices = np.asarray(arrays["ars_test_idx"])
        split = "test = ars_test_idx (faces_test.csv of blei-lab/ars-reparameterization)"
        file_format = "npz"
    images = check_image_stack(images, argument)
    check_counts(images, argument)
    num_images = images.shape[0]
    train_indices = np.setdiff1d(np.arange(num_images), test_indices)
    train_indices, test_indices = check_split(train_indices, test_indices, num_images, f"{source} (split)")
    flat = images.reshape(num_images, -1)
    info = {
        "source": str(source),
        "format": file_format,
        "split": split,
        "num_images": int(num_images),
        "test_indices": [int(i) for i in test_indices],
        "seed": int(seed),
        "values": "grey levels used as Poisson counts",
    }
    return make_dataset(
        "olivetti",
        flat[train_indices],
        flat[test_indices],
        "poisson",
        images.shape[1:],
        False,
        info,
    )

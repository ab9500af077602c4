"""Omniglot: 105x105 binary images of handwritten characters, ink = 1, for a Bernoulli likelihood.

Ruiz, Titsias & Blei (2016, experiments section) fit beta-gamma matrix factorization to
Omniglot restricted to 10 alphabets with 295 characters in all: 4425 training images (15
drawers per character) and 1475 test images (the other 5 drawers). The paper does not name the
alphabets; :data:`DEFAULT_ALPHABETS` is our documented choice.

Each character of Omniglot (Lake, Salakhutdinov & Tenenbaum 2015, ``brendenlake/omniglot``) is
drawn by 20 people. Drawers 1..15 give the training images, drawers 16..20 the test images. The
files store paper as 1 and ink as 0; the model sees ``x = 1 - image``, so ink is 1.

Sources (see ``PROVENANCE.md`` of the data folder):

* ``omniglot_105.npz``: ``images`` uint8 (32460, 105, 105), ``character`` 1..1623, ``drawer``
  1..20, ``alphabet`` 0..49 indexing ``alphabet_names``.
* the original zips ``images_background.zip`` / ``images_evaluation.zip``: PNGs at
  ``alphabet/characterNN/XXXX_YY.png``, ``XXXX`` the global character id, ``YY`` the drawer.
"""

import io
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from grepvi.data.dataset import Dataset, make_dataset, resolve_data_dir
from grepvi.data.validation import check_binary, check_image_stack, read_npz
from grepvi.errors import DataError

__all__ = [
    "OMNIGLOT_FILE",
    "OMNIGLOT_ZIP_FILES",
    "DEFAULT_ALPHABETS",
    "DEFAULT_NUM_CHARACTERS",
    "TRAIN_DRAWERS",
    "TEST_DRAWERS",
    "read_omniglot_npz",
    "read_omniglot_zip",
    "load_omniglot",
]

OMNIGLOT_FILE = "omniglot_105.npz"
OMNIGLOT_ZIP_FILES = ("images_background.zip", "images_evaluation.zip")

# The paper's 10 alphabets and 295 characters. Chosen by a deterministic search: the
# lexicographically first 10 alphabets, taken in order of their Omniglot character ids (the
# background alphabets come first), whose characters total exactly 295. The first ten
# alphabets by id already total 295 (26+41+40+24+46+14+26+33+22+23), i.e. the characters with
# ids 1..295, all from the background set.
DEFAULT_ALPHABETS = (
    "Arcadian",
    "Armenian",
    "Asomtavruli_(Georgian)",
    "Balinese",
    "Bengali",
    "Blackfoot_(Canadian_Aboriginal_Syllabics)",
    "Braille",
    "Cyrillic",
    "Early_Aramaic",
    "Syriac_(Estrangelo)",
)
DEFAULT_NUM_CHARACTERS = 295
TRAIN_DRAWERS = tuple(range(1, 16))
TEST_DRAWERS = tuple(range(16, 21))

_PNG_NAME = re.compile(r"^(\d+)_(\d+)\.png$", re.IGNORECASE)


def read_omniglot_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Images (paper = 1), character id, drawer and alphabet name of each image of the npz."""
    arrays = read_npz(path, ("images", "character", "drawer", "alphabet", "alphabet_names"))
    alphabet = np.asarray(arrays["alphabet"])
    names = np.asarray(arrays["alphabet_names"]).astype(str)
    if alphabet.size and (alphabet.min() < 0 or alphabet.max() >= names.size):
        raise DataError(
            f"{path} (array alphabet): expected indices in [0, {names.size}) into "
            f"alphabet_names, found range {alphabet.min()}..{alphabet.max()}"
        )
    return {
        "images": arrays["images"],
        "character": arrays["character"],
        "drawer": arrays["drawer"],
        "alphabet": names[alphabet],
    }


def _decode_png(data: bytes, member: str, path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            grey = np.asarray(image.convert("L"))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise DataError(f"{path}: member {member!r} is not a readable PNG image: {error}") from error
    return (grey > 127).astype(np.uint8)


def read_omniglot_zip(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Images (paper = 1), character id, drawer and alphabet name of each PNG of an Omniglot zip.

    Members are ``[top/]alphabet/characterNN/XXXX_YY.png``; other members are skipped.
    """
    path = Path(path)
    images, characters, drawers, alphabets, members = [], [], [], [], []
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                parts = member.split("/")
                if not member.lower().endswith(".png") or parts[0] == "__MACOSX":
                    continue
                match = _PNG_NAME.match(parts[-1])
                if match is None or len(parts) < 3:
                    raise DataError(
                        f"{path}: expected PNG members named alphabet/characterNN/XXXX_YY.png, "
                        f"found {member!r}"
                    )
                images.append(_decode_png(archive.read(member), member, path))
                characters.append(int(match.group(1)))
                drawers.append(int(match.group(2)))
                alphabets.append(parts[-3])
                members.append(member)
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise DataError(
            f"{path}: not a valid zip file (expected a complete zip archive of Omniglot PNGs; "
            f"it is truncated or of another format: {error})"
        ) from error
    if not images:
        raise DataError(f"{path}: expected PNG members alphabet/characterNN/XXXX_YY.png, found none")
    shapes = {image.shape for image in images}
    if len(shapes) > 1:
        pairs = zip(members, images, strict=True)
        odd = next(member for member, image in pairs if image.shape != images[0].shape)
        raise DataError(
            f"{path}: expected images of one shape, found images with inconsistent shapes "
            f"{sorted(shapes)} (e.g. {members[0]!r} is {images[0].shape}, {odd!r} differs)"
        )
    return {
        "images": np.stack(images),
        "character": np.asarray(characters),
        "drawer": np.asarray(drawers),
        "alphabet": np.asarray(alphabets, dtype=str),
    }


def _read_sources(sources: list[Path]) -> dict[str, np.ndarray]:
    parts = [
        read_omniglot_npz(source) if source.suffix.lower() == ".npz" else read_omniglot_zip(source)
        for source in sources
    ]
    for source, part in zip(sources, parts, strict=True):
        images = check_image_stack(part["images"], f"{source} (images)")
        for key in ("character", "drawer", "alphabet"):
            if np.shape(part[key]) != images.shape[:1]:
                raise DataError(
                    f"{source} (array {key}): expected one entry per image, shape "
                    f"{images.shape[:1]}, found shape {np.shape(part[key])}"
                )
    shapes = {part["images"].shape[1:] for part in parts}
    if len(shapes) > 1:
        raise DataError(
            f"{', '.join(map(str, sources))}: expected images of one shape, found images with "
            f"inconsistent shapes {sorted(shapes)}"
        )
    if len(parts) == 1:
        return parts[0]
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def _select_alphabets(requested, available: list[str]) -> list[str]:
    if isinstance(requested, str) and requested == "all":
        return available
    if requested is None:
        requested, label = DEFAULT_ALPHABETS, "the default alphabets"
    else:
        requested = [requested] if isinstance(requested, str) else list(requested)
        label = "alphabets"
    unknown = [name for name in requested if name not in available]
    if unknown or not requested:
        raise DataError(
            f"{label}: expected names among the alphabets of the data, or 'all'; found "
            f"{', '.join(map(repr, unknown)) or 'an empty list'} not available; available: "
            f"{', '.join(available)}"
        )
    return list(dict.fromkeys(requested))


def load_omniglot(
    data_dir: str | os.PathLike | None = None,
    *,
    path: str | os.PathLike | None = None,
    seed: int = 0,
    alphabets: str | list[str] | tuple[str, ...] | None = None,
) -> Dataset:
    """Omniglot with ink = 1: drawers 1..15 train, drawers 16..20 test.

    Args:
      data_dir: folder holding ``omniglot_105.npz``, or else ``images_background.zip`` and/or
        ``images_evaluation.zip``.
      path: read this file instead (the ``.npz`` or one zip of PNGs).
      seed: unused (the split is fixed); recorded in ``info``.
      alphabets: names of the alphabets to keep; None for :data:`DEFAULT_ALPHABETS` (10
        alphabets, 295 characters, 4425 / 1475 images), "all" for every alphabet.
    """
    if path is not None:
        sources = [Path(path)]
    else:
        directory = resolve_data_dir(data_dir)
        if (directory / OMNIGLOT_FILE).is_file():
            sources = [directory / OMNIGLOT_FILE]
        else:
            candidates = [directory / name for name in OMNIGLOT_ZIP_FILES]
            sources = [candidate for candidate in candidates if candidate.is_file()]
        if not sources:
            raise DataError(
                f"data set 'omniglot': expected {OMNIGLOT_FILE} or "
                f"{' / '.join(OMNIGLOT_ZIP_FILES)} in the data directory {str(directory)!r}, "
                "found none; point --data-dir or GREPVI_DATA_DIR at the folder that holds them"
            )
    data = _read_sources(sources)
    argument = f"{', '.join(map(str, sources))} (images)"
    check_binary(data["images"], argument)
    drawer = data["drawer"]
    if drawer.min() < TRAIN_DRAWERS[0] or drawer.max() > TEST_DRAWERS[-1]:
        raise DataError(
            f"{argument}: expected drawers {TRAIN_DRAWERS[0]}..{TEST_DRAWERS[-1]}, found "
            f"{drawer.min()}..{drawer.max()}"
        )
    first_character = {}
    for name, character in zip(data["alphabet"].tolist(), data["character"].tolist(), strict=True):
        first_character[name] = min(character, first_character.get(name, character))
    available = sorted(first_character, key=lambda name: (first_character[name], name))
    chosen = _select_alphabets(alphabets, available)
    keep = np.flatnonzero(np.isin(data["alphabet"], chosen))
    keep = keep[np.lexsort((drawer[keep], data["character"][keep]))]
    train_rows = keep[drawer[keep] <= TRAIN_DRAWERS[-1]]
    test_rows = keep[drawer[keep] >= TEST_DRAWERS[0]]
    for side, rows, drawers in (
        ("train", train_rows, TRAIN_DRAWERS),
        ("test", test_rows, TEST_DRAWERS),
    ):
        if rows.size == 0:
            raise DataError(
                f"{argument}: expected images by drawers {drawers[0]}..{drawers[-1]} for the "
                f"{side} split of alphabets {', '.join(chosen)}, found none (an empty {side} split)"
            )
    images = data["images"]
    flat = images.reshape(images.shape[0], -1)
    info = {
        "source": [str(source) for source in sources],
        "format": "npz" if sources[0].suffix.lower() == ".npz" else "zip",
        "alphabets": [str(name) for name in chosen],
        "num_characters": int(np.unique(data["character"][keep]).size),
        "split": (
            f"drawers {TRAIN_DRAWERS[0]}..{TRAIN_DRAWERS[-1]} train, "
            f"{TEST_DRAWERS[0]}..{TEST_DRAWERS[-1]} test"
        ),
        "values": "1 = ink, 0 = paper (x = 1 - image)",
        "seed": int(seed),
    }
    return make_dataset(
        "omniglot",
        1 - flat[train_rows],
        1 - flat[test_rows],
        "bernoulli",
        images.shape[1:],
        False,
        info,
    )

"""Tests of grepvi.data: the paper's four data sets, the original file formats, bad input.

The real files are those of ``shared/data`` (see its ``PROVENANCE.md``); tests that need them
skip when the folder is absent. Tests of the original formats build tiny files in ``tmp_path``
and check they load exactly like the equivalent arrays.
"""

import gzip
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from grepvi.data import (
    DATASET_NAMES,
    DEFAULT_ALPHABETS,
    Dataset,
    load_dataset,
    resolve_data_dir,
)
from grepvi.data.mnist import load_mnist
from grepvi.data.nips import load_nips
from grepvi.data.olivetti import load_olivetti
from grepvi.data.omniglot import load_omniglot
from grepvi.errors import DataError

REAL_DATA_DIR = Path(
    os.environ.get("GREPVI_DATA_DIR") or Path(__file__).parents[1] / ".." / "shared" / "data"
)


def _real_file(name: str) -> Path:
    path = REAL_DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"real data file {path} is absent")
    return path


def _check_record(dataset: Dataset) -> None:
    assert dataset.train.dtype == np.float32 and dataset.test.dtype == np.float32
    assert dataset.train.ndim == 2 and dataset.train.shape[1] == dataset.test.shape[1]
    json.dumps(dataset.info)


# --------------------------------------------------------------------------- real files


@pytest.fixture(scope="module")
def omniglot_default() -> Dataset:
    _real_file("omniglot_105.npz")
    return load_dataset("omniglot", REAL_DATA_DIR)


def test_olivetti_real_split_and_values():
    with np.load(_real_file("olivetti_faces.npz")) as archive:
        images, test_indices = archive["images"], archive["ars_test_idx"]
    faces = load_dataset("olivetti", REAL_DATA_DIR)
    _check_record(faces)
    assert faces.name == "olivetti" and faces.likelihood == "poisson"
    by_file = load_dataset("olivetti_faces.npz", REAL_DATA_DIR)
    assert by_file.name == "olivetti"
    np.testing.assert_array_equal(by_file.train, faces.train)
    assert faces.train.shape == (320, 4096) and faces.test.shape == (80, 4096)
    assert faces.image_shape == (64, 64) and not faces.heldout_entries
    np.testing.assert_array_equal(faces.test, images[test_indices].reshape(80, -1))
    assert sorted(faces.info["test_indices"]) == sorted(10 * s + i for s in range(40) for i in (8, 9))
    both = np.concatenate([faces.train, faces.test])
    assert both.min() == 0 and both.max() == 242
    assert np.array_equal(both, np.round(both))


def test_olivetti_real_mat_gives_the_same_split(tmp_path):
    with np.load(_real_file("olivetti_faces.npz")) as archive:
        images = archive["images"]
    faces_columns = images.transpose(0, 2, 1).reshape(400, 4096).T
    scipy.io.savemat(tmp_path / "olivettifaces.mat", {"faces": faces_columns})
    from_mat = load_dataset(str(tmp_path / "olivettifaces.mat"))
    from_npz = load_dataset("olivetti", REAL_DATA_DIR)
    assert from_mat.name == "olivetti"
    np.testing.assert_array_equal(from_mat.train, from_npz.train)
    np.testing.assert_array_equal(from_mat.test, from_npz.test)


def test_mnist_real_subsets_are_seeded_disjoint_and_binary():
    with np.load(_real_file("mnist_t10k.npz")) as archive:
        images = archive["images"]
    digits = load_dataset("mnist", REAL_DATA_DIR)
    _check_record(digits)
    assert digits.train.shape == (5000, 784) and digits.test.shape == (2000, 784)
    assert digits.likelihood == "bernoulli" and digits.image_shape == (28, 28)
    permutation = np.random.default_rng(0).permutation(10000)
    assert np.intersect1d(permutation[:5000], permutation[5000:7000]).size == 0
    expected = (images.reshape(10000, -1) > 127).astype(np.float32)
    np.testing.assert_array_equal(digits.train, expected[permutation[:5000]])
    np.testing.assert_array_equal(digits.test, expected[permutation[5000:7000]])
    assert set(np.unique(digits.train)) == {0.0, 1.0}
    again = load_dataset("mnist", REAL_DATA_DIR, seed=0)
    other = load_dataset("mnist", REAL_DATA_DIR, seed=1)
    np.testing.assert_array_equal(again.train, digits.train)
    assert not np.array_equal(other.train, digits.train)
    small = load_dataset("mnist", REAL_DATA_DIR, num_train=100, num_test=50)
    assert small.train.shape == (100, 784) and small.test.shape == (50, 784)


def test_nips_real_source_split():
    with np.load(_real_file("nips2011_bow.npz")) as archive:
        doc, word, count = archive["doc"], archive["word"], archive["count"]
    full = np.zeros((305, 5715))
    np.add.at(full, (doc, word), count)
    corpus = load_dataset("nips", REAL_DATA_DIR)
    _check_record(corpus)
    assert corpus.train.shape == corpus.test.shape == (305, 5715)
    assert corpus.heldout_entries and corpus.likelihood == "poisson" and corpus.image_shape is None
    np.testing.assert_array_equal(corpus.train + corpus.test, full)
    assert corpus.test.sum() / full.sum() == pytest.approx(0.20, abs=0.001)


def test_nips_real_random_split_is_seeded():
    _real_file("nips2011_bow.npz")
    corpus = load_dataset("nips", REAL_DATA_DIR, split="random")
    source = load_dataset("nips", REAL_DATA_DIR)
    np.testing.assert_array_equal(corpus.train + corpus.test, source.train + source.test)
    # 612,508 tokens: the standard error of the test share is 0.00055.
    assert corpus.test.sum() / (corpus.train + corpus.test).sum() == pytest.approx(0.25, abs=0.003)
    again = load_dataset("nips", REAL_DATA_DIR, split="random", seed=0)
    other = load_dataset("nips", REAL_DATA_DIR, split="random", seed=1)
    np.testing.assert_array_equal(again.test, corpus.test)
    assert not np.array_equal(other.test, corpus.test)
    half = load_dataset("nips", REAL_DATA_DIR, split="random", test_fraction=0.5)
    assert half.test.sum() / (half.train + half.test).sum() == pytest.approx(0.5, abs=0.003)


def test_omniglot_real_default_alphabets(omniglot_default):
    letters = omniglot_default
    _check_record(letters)
    assert letters.train.shape == (4425, 105 * 105) and letters.test.shape == (1475, 105 * 105)
    assert letters.info["num_characters"] == 295
    assert letters.info["alphabets"] == list(DEFAULT_ALPHABETS) and len(DEFAULT_ALPHABETS) == 10
    assert letters.likelihood == "bernoulli" and letters.image_shape == (105, 105)
    assert set(np.unique(letters.train)) == {0.0, 1.0}
    # Ink is 1 after x = 1 - image; PROVENANCE.md gives about 7.6% ink over the whole set.
    assert letters.train.mean() == pytest.approx(0.076, abs=0.01)


def test_omniglot_real_rows_are_inverted_images_in_character_drawer_order(omniglot_default):
    with np.load(_real_file("omniglot_105.npz")) as archive:
        character, drawer = archive["character"], archive["drawer"]
        first = np.flatnonzero((character == 1) & (drawer == 1))[0]
        last = np.flatnonzero((character == 295) & (drawer == 20))[0]
        images = archive["images"]
    np.testing.assert_array_equal(omniglot_default.train[0], 1 - images[first].ravel())
    np.testing.assert_array_equal(omniglot_default.test[-1], 1 - images[last].ravel())


# --------------------------------------------------------------------------- original formats


def _faces_like(num_subjects: int = 3, side: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(10 * num_subjects, side, side), dtype=np.uint8)


def test_olivetti_mat_matches_npz(tmp_path):
    images = _faces_like()
    test_indices = np.array([8, 9, 18, 19, 28, 29], dtype=np.int16)
    np.savez(tmp_path / "olivetti_faces.npz", images=images, ars_test_idx=test_indices)
    faces = images.transpose(0, 2, 1).reshape(len(images), -1).T
    scipy.io.savemat(tmp_path / "olivettifaces.mat", {"faces": faces})
    from_npz = load_olivetti(path=tmp_path / "olivetti_faces.npz")
    from_mat = load_olivetti(path=tmp_path / "olivettifaces.mat")
    np.testing.assert_array_equal(from_mat.train, from_npz.train)
    np.testing.assert_array_equal(from_mat.test, from_npz.test)
    np.testing.assert_array_equal(from_npz.test, images[test_indices].reshape(6, -1))
    assert from_npz.train.shape == (24, 16) and from_npz.image_shape == (4, 4)


def _write_idx(path: Path, images: np.ndarray, compress: bool) -> None:
    header = (0x00000803).to_bytes(4, "big") + np.asarray(images.shape, ">i4").tobytes()
    content = header + images.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(content) if compress else content)


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_matches_npz(tmp_path, compress):
    images = np.random.default_rng(1).integers(0, 256, size=(30, 4, 5), dtype=np.uint8)
    idx_path = tmp_path / ("t10k-images-idx3-ubyte" + (".gz" if compress else ""))
    _write_idx(idx_path, images, compress)
    np.savez(tmp_path / "digits.npz", images=images)
    from_idx = load_dataset(str(idx_path), num_train=20, num_test=6, seed=3)
    from_npz = load_mnist(path=tmp_path / "digits.npz", num_train=20, num_test=6, seed=3)
    assert from_idx.name == "mnist" and from_idx.image_shape == (4, 5)
    np.testing.assert_array_equal(from_idx.train, from_npz.train)
    np.testing.assert_array_equal(from_idx.test, from_npz.test)
    permutation = np.random.default_rng(3).permutation(30)
    expected = (images[permutation[20:26]] > 127).reshape(6, -1)
    np.testing.assert_array_equal(from_idx.test, expected)


def _omniglot_arrays(side: int = 6):
    """Two alphabets, three characters, 20 drawers each; paper = 1."""
    rng = np.random.default_rng(2)
    character = np.repeat([1, 2, 3], 20)
    drawer = np.tile(np.arange(1, 21), 3)
    alphabet_names = np.array(["Alpha", "Beta"])
    alphabet = np.where(character <= 2, 0, 1)
    images = (rng.random((60, side, side)) > 0.2).astype(np.uint8)
    return images, character, drawer, alphabet, alphabet_names


def _write_omniglot_zip(path: Path, images, character, drawer, alphabet, alphabet_names):
    from PIL import Image

    with zipfile.ZipFile(path, "w") as archive:
        for image, char, draw, alpha in zip(images, character, drawer, alphabet, strict=True):
            png = path.parent / "one.png"
            Image.fromarray((image * 255).astype(np.uint8)).convert("1").save(png)
            member = f"images_background/{alphabet_names[alpha]}/character{char:02d}/"
            archive.write(png, member + f"{char:04d}_{draw:02d}.png")


def test_omniglot_zip_matches_npz(tmp_path):
    images, character, drawer, alphabet, names = _omniglot_arrays()
    np.savez(
        tmp_path / "letters.npz",
        images=images,
        character=character,
        drawer=drawer,
        alphabet=alphabet,
        alphabet_names=names,
    )
    _write_omniglot_zip(tmp_path / "letters.zip", images, character, drawer, alphabet, names)
    from_npz = load_omniglot(path=tmp_path / "letters.npz", alphabets="all")
    from_zip = load_dataset(str(tmp_path / "letters.zip"), alphabets="all")
    assert from_zip.name == "letters" and from_zip.image_shape == (6, 6)
    np.testing.assert_array_equal(from_zip.train, from_npz.train)
    np.testing.assert_array_equal(from_zip.test, from_npz.test)
    assert from_npz.train.shape == (45, 36) and from_npz.test.shape == (15, 36)
    np.testing.assert_array_equal(from_npz.train[0], 1 - images[0].ravel())
    beta = load_omniglot(path=tmp_path / "letters.zip", alphabets=["Beta"])
    assert beta.train.shape == (15, 36) and beta.info["num_characters"] == 1
    with pytest.raises(DataError, match="Arcadian.*available: Alpha, Beta"):
        load_omniglot(path=tmp_path / "letters.zip")


def _nips_like(seed: int = 4):
    rng = np.random.default_rng(seed)
    full = rng.poisson(2.0, size=(6, 8)) * (rng.random((6, 8)) < 0.7)
    doc, word = np.nonzero(full)
    return doc.astype(np.int32), word.astype(np.int32), full[doc, word].astype(np.int32), full


@pytest.mark.parametrize("compress", [False, True])
def test_docword_matches_npz_random_split(tmp_path, compress):
    doc, word, count, full = _nips_like()
    lines = [str(full.shape[0]), str(full.shape[1]), str(len(doc))]
    lines += [f"{d + 1} {w + 1} {c}" for d, w, c in zip(doc, word, count, strict=True)]
    text = ("\n".join(lines) + "\n").encode()
    docword = tmp_path / ("docword.tiny.txt" + (".gz" if compress else ""))
    docword.write_bytes(gzip.compress(text) if compress else text)
    (tmp_path / "vocab.tiny.txt").write_text("\n".join(f"word{i}" for i in range(8)) + "\n")
    np.savez(
        tmp_path / "bow.npz",
        doc=doc,
        word=word,
        count=count,
        count_train=count,
        count_test=np.zeros_like(count),
        shape=np.array(full.shape),
    )
    from_docword = load_dataset(str(docword), seed=5, test_fraction=0.3)
    from_npz = load_nips(path=tmp_path / "bow.npz", split="random", test_fraction=0.3, seed=5)
    assert from_docword.name == "docword.tiny" and from_docword.heldout_entries
    np.testing.assert_array_equal(from_docword.train, from_npz.train)
    np.testing.assert_array_equal(from_docword.test, from_npz.test)
    np.testing.assert_array_equal(from_docword.train + from_docword.test, full)
    assert from_docword.info["vocabulary"] == [f"word{i}" for i in range(8)]


def test_generic_npz_counts_images_and_splits(tmp_path):
    rng = np.random.default_rng(6)
    counts = rng.poisson(3.0, size=(50, 7))
    np.savez(tmp_path / "counts.npz", counts=counts)
    data = load_dataset(str(tmp_path / "counts.npz"), seed=1)
    assert data.name == "counts" and data.likelihood == "poisson" and data.image_shape is None
    assert data.train.shape == (40, 7) and data.test.shape == (10, 7)
    permutation = np.random.default_rng(1).permutation(50)
    np.testing.assert_array_equal(data.test, counts[permutation[:10]])
    np.testing.assert_array_equal(load_dataset(str(tmp_path / "counts.npz"), seed=1).train, data.train)
    assert not np.array_equal(load_dataset(str(tmp_path / "counts.npz"), seed=2).train, data.train)
    images = (rng.random((12, 3, 4)) > 0.5).astype(np.uint8)
    np.savez(tmp_path / "binary.npz", images=images[:9], test_images=images[9:])
    binary = load_dataset("binary.npz", tmp_path)
    assert binary.likelihood == "bernoulli" and binary.image_shape == (3, 4)
    np.testing.assert_array_equal(binary.test, images[9:].reshape(3, 12))
    as_counts = load_dataset("binary.npz", tmp_path, likelihood="poisson")
    assert as_counts.likelihood == "poisson"
    np.savez(tmp_path / "indexed.npz", counts=counts, test_idx=np.array([0, 5]))
    indexed = load_dataset(str(tmp_path / "indexed.npz"))
    np.testing.assert_array_equal(indexed.test, counts[[0, 5]])
    assert indexed.train.shape == (48, 7)
    scipy.io.savemat(tmp_path / "counts.mat", {"counts": counts, "test_idx": np.array([0, 5])})
    np.testing.assert_array_equal(load_dataset(str(tmp_path / "counts.mat")).test, indexed.test)


def test_data_dir_from_environment(tmp_path, monkeypatch):
    np.savez(tmp_path / "counts.npz", counts=np.ones((5, 2), dtype=np.int64) * 2)
    monkeypatch.setenv("GREPVI_DATA_DIR", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert resolve_data_dir(tmp_path / "..") == tmp_path / ".."
    assert load_dataset("counts.npz").train.shape == (4, 2)


# --------------------------------------------------------------------------- bad input


def test_no_data_dir_names_both_ways(monkeypatch):
    monkeypatch.delenv("GREPVI_DATA_DIR", raising=False)
    with pytest.raises(DataError, match="--data-dir.*GREPVI_DATA_DIR"):
        resolve_data_dir()
    with pytest.raises(DataError, match="--data-dir.*GREPVI_DATA_DIR"):
        load_dataset("olivetti")


def test_data_dir_that_does_not_exist(tmp_path):
    with pytest.raises(DataError, match="nowhere.*expected an existing folder"):
        resolve_data_dir(tmp_path / "nowhere")


def test_missing_file_names_path_and_how_to_set_the_folder(tmp_path):
    with pytest.raises(DataError, match="absent.npz.*--data-dir or GREPVI_DATA_DIR"):
        load_dataset("absent.npz", tmp_path)
    for name, file_name in (
        ("olivetti", "olivetti_faces.npz"),
        ("mnist", "mnist_t10k.npz"),
        ("nips", "nips2011_bow.npz"),
        ("omniglot", "omniglot_105.npz"),
    ):
        with pytest.raises(DataError, match=f"'{name}'.*{file_name}.*--data-dir"):
            load_dataset(name, tmp_path)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(DataError, match="'mnsit'.*olivetti, nips, mnist, omniglot"):
        load_dataset("mnsit")
    assert DATASET_NAMES == ("olivetti", "nips", "mnist", "omniglot")


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        ("bad.npz", "not a valid .npz"),
        ("bad.mat", "not a valid MATLAB .mat"),
        ("bad.zip", "not a valid zip"),
        ("t10k-images-idx3-ubyte", "IDX magic number 0x00000803"),
        ("unknown.bin", "known format"),
    ],
)
def test_file_of_another_format(tmp_path, file_name, expected):
    (tmp_path / file_name).write_bytes(b"this is not a data file at all, just some text\n" * 4)
    with pytest.raises(DataError, match=expected):
        load_dataset(str(tmp_path / file_name))


def _truncate(path: Path) -> None:
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])


def test_truncated_files(tmp_path):
    images = _faces_like(side=16)
    np.savez(tmp_path / "olivetti_faces.npz", images=images, ars_test_idx=np.arange(8, 10))
    scipy.io.savemat(tmp_path / "faces.mat", {"faces": images.reshape(30, -1).T})
    _write_idx(tmp_path / "raw-idx3-ubyte", images, compress=False)
    _write_idx(tmp_path / "gz-idx3-ubyte.gz", images, compress=True)
    arrays = _omniglot_arrays()
    _write_omniglot_zip(tmp_path / "letters.zip", *arrays)
    expected = {
        "olivetti_faces.npz": "truncated",
        "faces.mat": "truncated",
        "raw-idx3-ubyte": "truncated",
        "gz-idx3-ubyte.gz": "truncated",
        "letters.zip": "truncated",
    }
    for file_name, message in expected.items():
        _truncate(tmp_path / file_name)
        options = {"alphabets": "all"} if file_name.endswith(".zip") else {}
        with pytest.raises(DataError, match=f"{file_name}.*{message}"):
            load_dataset(str(tmp_path / file_name), **options)


def test_truncated_docword(tmp_path):
    path = tmp_path / "docword.cut.txt"
    path.write_text("2\n3\n4\n1 1 2\n1 2 1\n2 3 5\n")
    with pytest.raises(DataError, match="NNZ = 4 triplets.*truncated"):
        load_dataset(str(path))


def test_missing_arrays_are_named(tmp_path):
    np.savez(tmp_path / "olivetti_faces.npz", images=_faces_like())
    with pytest.raises(DataError, match="missing array.*ars_test_idx.*found images"):
        load_dataset("olivetti", tmp_path)
    np.savez(tmp_path / "nips2011_bow.npz", doc=np.zeros(3), word=np.zeros(3))
    with pytest.raises(DataError, match="count, count_train, count_test, shape"):
        load_dataset("nips", tmp_path)
    np.savez(tmp_path / "other.npz", pixels=np.zeros((3, 2, 2)))
    with pytest.raises(DataError, match="images or counts.*found pixels"):
        load_dataset(str(tmp_path / "other.npz"))
    scipy.io.savemat(tmp_path / "other.mat", {"pixels": np.zeros((3, 4))})
    with pytest.raises(DataError, match="images or counts.*found pixels"):
        load_dataset(str(tmp_path / "other.mat"))


def test_images_with_inconsistent_shapes(tmp_path):
    np.savez(tmp_path / "mixed.npz", images=np.zeros((4, 3, 3)), test_images=np.zeros((2, 3, 4)))
    with pytest.raises(DataError, match="inconsistent shapes"):
        load_dataset(str(tmp_path / "mixed.npz"))
    np.savez(tmp_path / "flat.npz", images=np.zeros((4, 9)))
    with pytest.raises(DataError, match=r"\(n, height, width\).*\(4, 9\)"):
        load_dataset(str(tmp_path / "flat.npz"))
    images, character, drawer, alphabet, names = _omniglot_arrays()
    _write_omniglot_zip(tmp_path / "a.zip", images, character, drawer, alphabet, names)
    with zipfile.ZipFile(tmp_path / "a.zip", "a") as archive:
        from PIL import Image

        Image.fromarray(np.zeros((5, 7), dtype=np.uint8)).save(tmp_path / "odd.png")
        archive.write(tmp_path / "odd.png", "images_background/Beta/character03/0003_21.png")
    with pytest.raises(DataError, match="inconsistent shapes"):
        load_dataset(str(tmp_path / "a.zip"), alphabets="all")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.array([[1.0, -2.0], [0.0, 3.0]]), "negative counts"),
        (np.array([[1.0, 2.5], [0.0, 3.0]]), "fractional counts"),
        (np.array([[1.0, np.nan], [0.0, 3.0]]), "NaN"),
        (np.array([[1, -2], [0, 3]]), "negative counts"),
    ],
)
def test_bad_counts_for_poisson(tmp_path, values, message):
    counts = np.tile(values, (5, 1))
    np.savez(tmp_path / "counts.npz", counts=counts)
    with pytest.raises(DataError, match=f"counts.npz.*{message}"):
        load_dataset(str(tmp_path / "counts.npz"), likelihood="poisson")
    with pytest.raises(DataError, match=f"counts.npz.*{message}"):
        load_dataset(str(tmp_path / "counts.npz"))


def test_bad_counts_in_olivetti_and_nips(tmp_path):
    images = _faces_like().astype(np.float64)
    images[3, 1, 1] = 0.5
    scipy.io.savemat(tmp_path / "olivettifaces.mat", {"faces": images.reshape(30, -1).T})
    with pytest.raises(DataError, match="fractional counts"):
        load_dataset("olivetti", tmp_path)
    doc, word, count, full = _nips_like()
    count[0] = -1
    np.savez(
        tmp_path / "nips2011_bow.npz",
        doc=doc,
        word=word,
        count=count,
        count_train=count,
        count_test=np.zeros_like(count),
        shape=np.array(full.shape),
    )
    with pytest.raises(DataError, match="array count.*negative counts"):
        load_dataset("nips", tmp_path)


def test_non_binary_data_for_bernoulli(tmp_path):
    np.savez(tmp_path / "grey.npz", images=np.full((5, 2, 2), 3))
    with pytest.raises(DataError, match="grey.npz.*binary values.*found other values"):
        load_dataset(str(tmp_path / "grey.npz"), likelihood="bernoulli")
    images, character, drawer, alphabet, names = _omniglot_arrays()
    images[0, 0, 0] = 2
    np.savez(
        tmp_path / "omniglot_105.npz",
        images=images,
        character=character,
        drawer=drawer,
        alphabet=alphabet,
        alphabet_names=names,
    )
    with pytest.raises(DataError, match="binary values"):
        load_dataset("omniglot", tmp_path, alphabets="all")


def test_overlapping_or_empty_splits(tmp_path):
    counts = np.ones((6, 3), dtype=np.int64)
    np.savez(tmp_path / "overlap.npz", counts=counts, train_idx=[0, 1, 2], test_idx=[2, 3])
    with pytest.raises(DataError, match="disjoint train and test rows.*1 row"):
        load_dataset(str(tmp_path / "overlap.npz"))
    np.savez(tmp_path / "empty.npz", counts=counts, test_idx=np.array([], dtype=np.int64))
    with pytest.raises(DataError, match="empty test split"):
        load_dataset(str(tmp_path / "empty.npz"))
    np.savez(tmp_path / "all_test.npz", counts=counts, test_idx=np.arange(6))
    with pytest.raises(DataError, match="empty train split"):
        load_dataset(str(tmp_path / "all_test.npz"))
    np.savez(tmp_path / "olivetti_faces.npz", images=_faces_like(), ars_test_idx=[8, 8, 9])
    with pytest.raises(DataError, match="distinct row indices"):
        load_dataset("olivetti", tmp_path)
    doc, word, count, full = _nips_like()
    np.savez(
        tmp_path / "nips2011_bow.npz",
        doc=doc,
        word=word,
        count=count,
        count_train=count,
        count_test=np.zeros_like(count),
        shape=np.array(full.shape),
    )
    with pytest.raises(DataError, match="empty test split"):
        load_dataset("nips", tmp_path)
    images, character, drawer, alphabet, names = _omniglot_arrays()
    keep = drawer <= 15
    np.savez(
        tmp_path / "omniglot_105.npz",
        images=images[keep],
        character=character[keep],
        drawer=drawer[keep],
        alphabet=alphabet[keep],
        alphabet_names=names,
    )
    with pytest.raises(DataError, match="omniglot_105.npz.*drawers 16..20.*empty test split"):
        load_dataset("omniglot", tmp_path, alphabets="all")


def test_bad_options(tmp_path):
    doc, word, count, full = _nips_like()
    np.savez(
        tmp_path / "nips2011_bow.npz",
        doc=doc,
        word=word,
        count=count,
        count_train=count - count // 2,
        count_test=count // 2,
        shape=np.array(full.shape),
    )
    with pytest.raises(DataError, match="split: expected one of source, random"):
        load_dataset("nips", tmp_path, split="half")
    with pytest.raises(DataError, match="test_fraction: applies to split='random' only"):
        load_dataset("nips", tmp_path, test_fraction=0.3)
    with pytest.raises(DataError, match="test_fraction.*between 0 and 1.*1.5"):
        load_dataset("nips", tmp_path, split="random", test_fraction=1.5)
    with pytest.raises(DataError, match="unknown option.*num_train"):
        load_dataset("nips", tmp_path, num_train=3)
    with pytest.raises(DataError, match="seed: expected a non-negative integer"):
        load_dataset("nips", tmp_path, seed=-1)
    np.savez(tmp_path / "mnist_t10k.npz", images=np.zeros((10, 2, 2), dtype=np.uint8))
    with pytest.raises(DataError, match="num_train \\+ num_test.*at most the 10 images"):
        load_dataset("mnist", tmp_path)
    np.savez(tmp_path / "counts.npz", counts=np.ones((5, 2), dtype=np.int64))
    with pytest.raises(DataError, match="likelihood: expected one of poisson, bernoulli"):
        load_dataset("counts.npz", tmp_path, likelihood="gaussian")

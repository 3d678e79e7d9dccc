"""Tests of the data package: IDX reader, Fashion-MNIST builder, grain pipeline (fetching:
test_fetch.py; the data root, atomic writes and batched reads: test_data_files.py)."""

from __future__ import annotations

import gzip
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from batch_checks import assert_batches_equal, take
from data.builders.sources import dataset_info, get_data_source
from data.corpora import fashion_mnist
from data.errors import DataError
from data.formats.idx import read_idx, read_idx_shape, write_idx
from data.pipelines.images import compute_mean_std, image_batches
from data.pipelines.sharding import num_batches
from data.testing import FIXTURE_DIR, install_fashion_mnist_fixture

REPO = pathlib.Path(__file__).resolve().parents[1]
FETCH_HINT = "python -m data.fetch fashion_mnist"


class IdSource:
    """In-memory source whose label is the example index, so batches show which examples came."""

    def __init__(self, n, shape=(6, 6, 1)):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"image": self.images[i], "label": i}


def batches_of(source, **kw):
    kw = {"seed": 0, "image_shape": source.images.shape[1:], "mean": (0.0,), "std": (1.0,), **kw}
    return image_batches(source, **kw)


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory):
    """A data root with the fixture installed and prepared once for the whole module."""
    root = tmp_path_factory.mktemp("papers_jax_data")
    install_fashion_mnist_fixture(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAPERS_JAX_DATA", str(root))
        get_data_source("fashion_mnist", "train")
    return root


@pytest.fixture
def fixture_env(fixture_root, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(fixture_root))
    return fixture_root


# ------------------------------------------------------------------------------------ IDX


def test_idx_reads_the_fixture():
    images = read_idx(FIXTURE_DIR / "train-images-idx3-ubyte.gz")
    labels = read_idx(FIXTURE_DIR / "train-labels-idx1-ubyte.gz")
    assert images.shape == (2000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (2000,) and labels.dtype == np.uint8
    assert set(np.unique(labels)) == set(range(10))
    assert read_idx_shape(FIXTURE_DIR / "t10k-images-idx3-ubyte.gz") == (1000, 28, 28)
    assert read_idx(FIXTURE_DIR / "t10k-labels-idx1-ubyte.gz").max() <= 9


def test_idx_round_trip_plain_and_gzip(tmp_path):
    array = np.arange(60, dtype=np.int32).reshape(3, 4, 5) - 7
    for name in ("a.idx", "a.idx.gz"):
        write_idx(tmp_path / name, array)
        np.testing.assert_array_equal(read_idx(tmp_path / name), array)


def _header(dims):
    return bytes([0, 0, 8, len(dims)]) + np.asarray(dims, ">u4").tobytes()


@pytest.mark.parametrize("name, content, message", [
    ("empty.gz", b"", "empty"),
    ("magic", b"\x08\x03\x00\x00" + bytes(100), "bad magic"),
    ("short", b"\x00\x00\x08", "not an IDX file"),
    ("trunc-header", bytes([0, 0, 8, 3, 0, 0]), "truncated header"),
    ("trunc", _header([60000, 28, 28]) + bytes(1000),
     "truncated: expected 47040000 bytes of data for shape (60000, 28, 28), found 1000"),
    # mtime=0: a fixed gzip header, so every pytest-xdist worker collects the same test id
    ("trunc.gz", gzip.compress(_header([10, 28, 28]) + bytes(5), mtime=0),
     "truncated: expected 7840"),
    ("extra", _header([2]) + bytes(3), "1 unexpected bytes"),
    ("corrupt.gz", b"\x1f\x8b" + bytes(range(200)), "corrupt gzip"),
])
def test_idx_errors_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_idx(path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_idx_header_sizes_too_large_for_int64_are_a_data_error(tmp_path):
    """The element count is computed exactly: (2^32 - 1)^2 wrapped to a negative int64 before."""
    path = tmp_path / "huge"
    path.write_bytes(_header([2**32 - 1, 2**32 - 1]) + bytes(10))
    with pytest.raises(DataError, match=f"truncated: expected {(2**32 - 1) ** 2} bytes"):
        read_idx(path)


def test_idx_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found") as err:
        read_idx(tmp_path / "nope.gz")
    assert str(tmp_path / "nope.gz") in str(err.value)


# ------------------------------------------------------------------------------------ builder


def test_builder_prepares_the_fixture(tmp_path, monkeypatch):
    install_fashion_mnist_fixture(tmp_path)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    for split, (images_file, labels_file) in fashion_mnist.SPLIT_FILES.items():
        source = get_data_source("fashion_mnist", split)
        images, labels = read_idx(FIXTURE_DIR / images_file), read_idx(FIXTURE_DIR / labels_file)
        assert len(source) == len(images) == {"train": 2000, "test": 1000}[split]
        examples = source.__getitems__(list(range(len(source))))
        np.testing.assert_array_equal(np.stack([e["image"] for e in examples]),
                                      images[..., None])
        np.testing.assert_array_equal([e["label"] for e in examples], labels)
    assert (tmp_path / "tfds" / "fashion_mnist_local" / "1.0.0").is_dir()
    info = dataset_info("fashion_mnist")
    assert info.splits == {"train": 2000, "test": 1000}
    assert (info.image_shape, info.num_classes, info.tfds_name) == ((28, 28, 1), 10,
                                                                    "fashion_mnist_local")
    assert info.class_names[0] == "T-shirt/top" and info.mean == (0.2860,)
    assert len(get_data_source("fashion_mnist", "train[:10%]")) == 200
    with pytest.raises(DataError, match="no split 'validation'"):
        get_data_source("fashion_mnist", "validation")


def test_missing_data_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    with pytest.raises(DataError, match=FETCH_HINT) as err:
        get_data_source("fashion_mnist", "train")
    expected_dir = tmp_path / "raw" / "fashion_mnist" / fashion_mnist.RAW_SUBDIR
    assert str(err.value) == (f"dataset 'fashion_mnist' not found in {expected_dir}; run: "
                              f"{FETCH_HINT}")
    with pytest.raises(DataError, match=FETCH_HINT):
        dataset_info("fashion_mnist")


def test_labels_and_images_must_agree(tmp_path, monkeypatch):
    raw = install_fashion_mnist_fixture(tmp_path)
    labels = raw / "t10k-labels-idx1-ubyte.gz"
    write_idx(labels, read_idx(labels)[:900])
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    with pytest.raises(DataError) as err:
        fashion_mnist.load_split("test")
    message = str(err.value)
    assert "1000 images" in message and "900 labels" in message
    assert str(labels) in message and str(raw / "t10k-images-idx3-ubyte.gz") in message
    with pytest.raises(DataError, match="1000 images .* but 900 labels"):
        get_data_source("fashion_mnist", "train")
    assert not (tmp_path / "tfds" / "fashion_mnist_local" / "1.0.0").exists()


@pytest.mark.parametrize("file, array, message", [
    ("t10k-labels-idx1-ubyte.gz", np.arange(-1, 9, dtype=np.int8), "0x08"),  # label -1
    ("t10k-images-idx3-ubyte.gz", np.zeros((10, 28, 28), np.int16), "0x08"),
    ("t10k-labels-idx1-ubyte.gz", np.array(3, np.uint8), r"labels of shape \(n,\)"),
    ("t10k-images-idx3-ubyte.gz", np.zeros((10, 28), np.uint8), r"images of shape \(n, 28"),
])
def test_raw_files_of_the_wrong_kind_are_refused(tmp_path, monkeypatch, file, array, message):
    """Signed labels (-1 became class 9 in the loss), other pixel types, zero-dimensional
    headers: each a DataError naming the file, from the header check and from the reader."""
    raw = install_fashion_mnist_fixture(tmp_path)
    write_idx(raw / file, array)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    check = fashion_mnist.check_raw_files if "shape" in message else \
        lambda: fashion_mnist.load_split("test")
    with pytest.raises(DataError, match=message) as err:
        check()
    assert str(raw / file) in str(err.value)
    with pytest.raises(DataError, match=message):
        fashion_mnist.load_split("test")


def test_unknown_dataset_and_source_kind():
    with pytest.raises(DataError, match="no local builder"):
        get_data_source("mnist", "train")
    with pytest.raises(DataError, match="allowed"):
        get_data_source("fashion_mnist", "train", source="hub")


# ------------------------------------------------------------------------------------ pipeline


def test_train_batches_are_deterministic_and_reshuffled_each_epoch():
    source = IdSource(100)
    first = take(batches_of(source, batch_size=10, train=True, num_epochs=2), 20)
    again = take(batches_of(source, batch_size=10, train=True, num_epochs=2), 20)
    assert_batches_equal(first, again)
    epochs = [np.concatenate([b["label"] for b in first[e * 10:(e + 1) * 10]]) for e in (0, 1)]
    for order in epochs:
        assert sorted(order) == list(range(100))
    assert not np.array_equal(epochs[0], epochs[1])
    other_seed = take(batches_of(source, batch_size=10, train=True, seed=1), 10)
    assert not np.array_equal(np.concatenate([b["label"] for b in other_seed]), epochs[0])
    batch = first[0]
    assert batch["image"].dtype == np.float32 and batch["image"].shape == (10, 6, 6, 1)
    assert batch["label"].dtype == np.int32 and batch["mask"].dtype == np.float32
    assert (batch["mask"] == 1).all()
    with pytest.raises(StopIteration):
        it = batches_of(source, batch_size=10, train=True, num_epochs=1)
        take(it, 11)


def test_process_shards_are_disjoint_cover_and_form_the_global_batch():
    source = IdSource(100)
    shards = [take(batches_of(source, batch_size=5, train=True, num_epochs=1, process_index=i,
                              process_count=2), 10) for i in range(2)]
    ids = [np.concatenate([b["label"] for b in shard]) for shard in shards]
    assert not set(ids[0]) & set(ids[1])
    assert sorted(np.concatenate(ids)) == list(range(100))
    # Step k of both processes, concatenated, is step k of one process with the global batch.
    single = take(batches_of(source, batch_size=10, train=True, num_epochs=1), 10)
    for k in range(10):
        np.testing.assert_array_equal(
            np.concatenate([shards[0][k]["label"], shards[1][k]["label"]]), single[k]["label"])
    # With a remainder every process still yields the same number of batches.
    counts = [len(list(batches_of(IdSource(103), batch_size=4, train=True, num_epochs=1,
                                  process_index=i, process_count=3))) for i in range(3)]
    assert counts == [8, 8, 8]


def test_eval_sees_every_example_once_with_mask_padding():
    source = IdSource(103)
    seen = []
    for i in range(2):
        batches = list(batches_of(source, batch_size=4, train=False, process_index=i,
                                  process_count=2))
        assert len(batches) == num_batches(103, batch_size=4, process_count=2) == 13
        for b in batches:
            assert b["image"].shape == (4, 6, 6, 1) and b["mask"].shape == (4,)
            seen.extend(b["label"][b["mask"] == 1])
            assert (b["image"][b["mask"] == 0] == 0).all()
    assert sorted(seen) == list(range(103))
    # Unsharded and in order.
    batches = list(batches_of(source, batch_size=10, train=False))
    labels = np.concatenate([b["label"] for b in batches])
    mask = np.concatenate([b["mask"] for b in batches])
    np.testing.assert_array_equal(labels[:103], np.arange(103))
    assert mask.sum() == 103 and (mask[103:] == 0).all() and len(mask) == 110


@pytest.mark.parametrize("train, augment", [(True, "crop_flip"), (True, "flip"), (True, "none"), (False, "none")])
def test_state_resumes_exactly(train, augment):
    source = IdSource(50)
    kw = dict(batch_size=4, train=train, augment=augment, seed=3)
    it = batches_of(source, **kw)
    take(it, 7)
    state = json.loads(json.dumps(it.get_state()))
    assert state == {"next_index": 7}
    expected = take(it, 5)
    resumed = batches_of(source, **kw)
    resumed.set_state(state)
    assert_batches_equal(take(resumed, 5), expected)


def test_augmentation_crops_and_flips_reproducibly():
    source = IdSource(64, shape=(28, 28, 1))
    plain = take(batches_of(source, batch_size=16, train=True), 4)
    augmented = take(batches_of(source, batch_size=16, train=True, augment="crop_flip"), 4)
    again = take(batches_of(source, batch_size=16, train=True, augment="crop_flip"), 4)
    assert_batches_equal(augmented, again)
    changed = 0
    for p, a in zip(plain, augmented):
        np.testing.assert_array_equal(p["label"], a["label"])
        for original, out in zip(p["image"], a["image"]):
            padded = np.pad(original, ((2, 2), (2, 2), (0, 0)))
            candidates = [padded[dy:dy + 28, dx:dx + 28] for dy in range(5) for dx in range(5)]
            candidates += [c[:, ::-1] for c in candidates]
            assert any(np.array_equal(out, c) for c in candidates)
            changed += not np.array_equal(out, original)
    assert changed > 32


def test_flip_augmentation_only_mirrors():
    """'flip' mirrors each image or leaves it, independently per image: about half of the 64
    are mirrored (4 SE = +-16), and some batch holds both kinds (a coin per batch would not)."""
    source = IdSource(64, shape=(28, 28, 1))
    plain = take(batches_of(source, batch_size=16, train=True), 4)
    flipped = take(batches_of(source, batch_size=16, train=True, augment="flip"), 4)
    mirrored, mixed_batches = 0, 0
    for p, a in zip(plain, flipped):
        in_batch = []
        for original, out in zip(p["image"], a["image"]):
            assert np.array_equal(out, original) or np.array_equal(out, original[:, ::-1])
            in_batch.append(not np.array_equal(out, original))
        mirrored += sum(in_batch)
        mixed_batches += 0 < sum(in_batch) < len(in_batch)
    assert 16 < mirrored < 48  # about half of the 64
    assert mixed_batches >= 3


def test_crop_flip_draws_offsets_and_flips_per_image_uniformly():
    """Recovers each image's crop offset (dy, dx in 0..4 for 28 px: 2 pixels of zero padding)
    and flip from 256 augmented noise images (every offset gives a different image). dy and dx
    each take all 5 values about equally often (4 SE on each count), independently of each
    other (dy == dx about 1/5 of the time), and offsets and flips differ within a batch: the
    draws are per image, not shared by a batch or by the two axes."""
    source = IdSource(256, shape=(28, 28, 1))
    plain = take(batches_of(source, batch_size=32, train=True), 8)
    augmented = take(batches_of(source, batch_size=32, train=True, augment="crop_flip"), 8)
    draws = []                                      # (batch, dy, dx, flip) per image
    for k, (p, a) in enumerate(zip(plain, augmented)):
        for original, out in zip(p["image"], a["image"]):
            padded = np.pad(original, ((2, 2), (2, 2), (0, 0)))
            found = [(dy, dx, flip) for dy in range(5) for dx in range(5) for flip in (0, 1)
                     if np.array_equal(out, padded[dy:dy + 28, dx:dx + 28][:, ::-1 if flip else 1])]
            assert len(found) == 1, found
            draws.append((k, *found[0]))
    batch, dy, dx, flip = np.array(draws).T
    n = len(draws)
    se_fifth = np.sqrt(n * 0.2 * 0.8)
    for axis in (dy, dx):
        counts = np.bincount(axis, minlength=5)
        assert (np.abs(counts - n / 5) <= 4 * se_fifth).all(), counts
    assert abs((dy == dx).sum() - n / 5) <= 4 * se_fifth
    assert abs(flip.sum() - n / 2) <= 4 * np.sqrt(n / 4)
    for k in range(8):
        here = batch == k
        assert len(set(zip(dy[here], dx[here]))) > 5 and 0 < flip[here].sum() < here.sum()


def test_normalisation_is_per_channel():
    """Each channel c is (x / 255 - mean[c]) / std[c] with its own constants, checked against
    NumPy on a 3-channel source with different constants per channel."""
    source = IdSource(12, shape=(4, 5, 3))
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.3, 0.4)
    batches = list(batches_of(source, batch_size=4, train=False, mean=mean, std=std))
    images = np.concatenate([b["image"] for b in batches])
    want = (source.images / 255.0 - np.array(mean)) / np.array(std)
    np.testing.assert_allclose(images, want, rtol=1e-5, atol=1e-5)


def test_unknown_augmentation_is_rejected():
    with pytest.raises(DataError, match=r"augment='rotate' is not one of \['none', 'flip', "
                                        r"'crop_flip', 'inception_crop'\]"):
        batches_of(IdSource(8, shape=(28, 28, 1)), batch_size=4, train=True, augment="rotate")


def test_normalisation_of_fashion_mnist(fixture_env):
    source = get_data_source("fashion_mnist", "test")
    batch = next(image_batches(source, batch_size=100, train=False, seed=0,
                               image_shape=(28, 28, 1)))
    raw = read_idx(FIXTURE_DIR / "t10k-images-idx3-ubyte.gz")[:100, ..., None]
    np.testing.assert_allclose(batch["image"], (raw / 255.0 - 0.2860) / 0.3530, atol=1e-5)
    np.testing.assert_array_equal(batch["label"],
                                  read_idx(FIXTURE_DIR / "t10k-labels-idx1-ubyte.gz")[:100])
    train = image_batches(get_data_source("fashion_mnist", "train"), batch_size=500, train=True,
                          seed=0, image_shape=(28, 28, 1))
    images = np.concatenate([b["image"] for b in take(train, 4)])
    assert abs(images.mean()) < 0.05 and abs(images.std() - 1) < 0.05


def test_wrong_image_shape_names_both_shapes(fixture_env):
    source = get_data_source("fashion_mnist", "train")
    with pytest.raises(DataError) as err:
        image_batches(source, batch_size=8, train=True, seed=0, image_shape=(32, 32, 3))
    assert str(err.value) == ("images of shape (32, 32, 3) expected, found (28, 28, 1) in "
                              "fashion_mnist_local split train (images of any size need "
                              "eval_resize 'resize' or 'center_crop')")


def test_labels_outside_the_classifier_s_classes_are_refused_naming_the_example():
    """IdSource's label is its index: with 8 classes example 8 is past the last (a NaN loss),
    in training and eval; TFDS's -1 is named; without num_classes nothing is checked."""
    unlabelled = type("Unlabelled", (IdSource,), {"__getitem__": lambda self, i: {
        "image": self.images[i], "label": -1}})(4)
    for train in (True, False):
        with pytest.raises(DataError, match=r"label 8 of example 8 in .* is not one of the "
                                            r"model's 8 classes \(0 to 7\): config.model.num_"):
            next(batches_of(IdSource(12), batch_size=12, train=train, num_classes=8))
    assert next(batches_of(IdSource(12), batch_size=12, train=False))["label"].max() == 11
    with pytest.raises(DataError, match=r"label -1 of example 0 .*-1 marks an unlabelled "):
        next(batches_of(unlabelled, batch_size=4, train=False, num_classes=10))


def test_compute_mean_std_matches_numpy():
    source = IdSource(3000, shape=(4, 4, 3))
    mean, std = compute_mean_std(source)
    x = source.images.reshape(-1, 3) / 255.0
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-9)
    np.testing.assert_allclose(std, x.std(0), rtol=1e-6)


def test_pipeline_argument_errors():
    source = IdSource(10)
    with pytest.raises(DataError, match="no normalisation constants"):
        image_batches(source, batch_size=2, train=True, seed=0, image_shape=(6, 6, 1))
    with pytest.raises(DataError, match="no batch"):
        batches_of(source, batch_size=8, train=True, num_epochs=1, process_count=2)
    with pytest.raises(DataError, match="process_index"):
        batches_of(source, batch_size=2, train=True, process_index=2, process_count=2)
    # A mean without a std used to fall back to the table's constants, dropping the mean given.
    with pytest.raises(DataError, match="pass both"):
        image_batches(source, batch_size=2, train=True, seed=0, image_shape=(6, 6, 1),
                      mean=(0.5,))
    for std in ((0.0,), (-1.0,), (float("nan"),)):
        with pytest.raises(DataError, match="positive"):
            batches_of(source, batch_size=2, train=True, std=std)


def test_data_imports_neither_train_nor_models():
    code = ("import sys, data.fetch, data.builders.sources, data.pipelines.images, data.testing, "
            "data.formats.idx; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('train', 'models')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_worker_processes_make_the_same_batches_and_resume():
    """worker_count=2 (data/pipelines/workers.py): the same batches as in this process, the
    augmentation being seeded by batch index; their state resumes exactly; evaluation and a
    negative count are refused."""
    source = IdSource(50)
    kw = dict(batch_size=4, train=True, augment="crop_flip", seed=3)
    expected = take(batches_of(source, **kw), 9)
    it = batches_of(source, worker_count=2, **kw)
    assert_batches_equal(take(it, 6), expected[:6])
    state = it.get_state()
    assert state != {"next_index": 6}  # the state of the workers' slices, not this process's
    it.close()
    resumed = batches_of(source, worker_count=2, **kw)
    resumed.set_state(state)
    assert_batches_equal(take(resumed, 3), expected[6:])
    resumed.close()
    with pytest.raises(DataError, match="worker processes are for training"):
        batches_of(source, batch_size=4, train=False, worker_count=2)
    with pytest.raises(DataError, match="non-negative integer"):
        batches_of(source, worker_count=-1, **kw)

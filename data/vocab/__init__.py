"""Vocabularies, trained on a dataset's training texts once and cached, or loaded from a file.

    wordpiece.py      BERT's WordPiece (HF tokenizers): trained deterministically, or vocab.txt
    sentencepiece.py  the SentencePiece model shared by source and target (translation)
    bpe.py            byte-level BPE (GPT-2's kind; HF tokenizers) for the causal LM
    cache.py          their cache under <root>/vocab/: file names, the lock, the atomic write
"""

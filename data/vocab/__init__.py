"""Vocabularies, trained on a dataset's training texts once and cached, or loaded from a file.

    wordpiece.py      BERT's WordPiece (HF tokenizers): trained deterministically, or vocab.txt
    sentencepiece.py  the SentencePiece model shared by source and target (translation)
    cache.py          their cache under <root>/vocab/: file names, the lock, the atomic write
"""

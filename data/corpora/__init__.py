"""Document corpora for BERT pretraining: readers of the raw files, one small module each.

    documents.py  Document (paragraphs of sentences + metadata), its TFDS layout, as_document
    sentences.py  the rule-based sentence splitter shared by austen and sotu
    splits.py     train/validation by held-out documents (stable hash, stratified)
    brown.py      Brown corpus (tagged form C): documents, POS tags, detokenization
    austen.py     Jane Austen's novels from janeaustenr: one document per chapter
    sotu.py       State of the Union addresses: one document per speech

The TFDS builders that use them are in data/builders/ (brown, austen, sotu).
"""

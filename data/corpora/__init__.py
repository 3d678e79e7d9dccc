"""Corpus readers: the raw files of each fetched dataset -> its examples, one module a dataset.

Each reader knows where `python -m data.fetch NAME` puts its files (`raw_folder()`), checks them
cheaply (`check_raw_files()`: DataError naming the fetch command) and reads them; none imports
TFDS. The builders of data/builders/ turn what they read into TFDS datasets.

    fashion_mnist.py  Fashion-MNIST IDX files -> images and labels of train / test
    bible.py          SWORD modules -> aligned World English Bible / Reina-Valera verse pairs
    alignment.py      Gale & Church length alignment (where two Bibles divide verses differently)
    ding.py           Ding dictionary -> German-English sentence pairs (GPL: never committed)
    documents.py      Document: paragraphs of sentences + metadata (the pretraining corpora)
    sentences.py      the rule-based sentence splitter shared by austen and sotu
    brown.py          Brown corpus (tagged form C): documents, POS tags, detokenization
    brown_tags.py     Brown POS tags -> the 12 universal tags
    austen.py         Jane Austen's novels from janeaustenr: one document per chapter
    sotu.py           State of the Union addresses: one document per speech
    spam.py           SpamAssassin emails -> subject + plain-text body, ham / spam
    tweets.py         sentiment-labelled tweets (license unverified: never committed)
    splits.py         the stable hashed splits: held-out documents, sentence pairs, texts
"""

"""Raw file formats of the fetched packages, read (and, for test fixtures, written) without
knowing which dataset they hold.

    idx.py    IDX arrays, the format of (Fashion-)MNIST, plain or gzip'd
    sword.py  SWORD zText Bible modules: a conf, a block index, a verse index, zlib blocks
    rdata.py  R's XDR serialization and lazy-load databases (.rdx/.rdb) of R packages' data
"""

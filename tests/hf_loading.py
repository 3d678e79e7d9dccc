"""Loading a checkpoint this project wrote with transformers' own `from_pretrained`, the way its
users load it, and checking that nothing was left out or made up on the way."""

from __future__ import annotations

import ast
import contextlib
import logging


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _loading_warnings():
    """The warnings of transformers' `from_pretrained`: a checkpoint tensor it did not use, or a
    weight it had to initialise at random, is only logged there (its library logger does not
    propagate to the root)."""
    handler = _Warnings()
    logger = logging.getLogger("transformers.modeling_flax_utils")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def load_pretrained(cls, folder, unused: tuple[str, ...] = (), **kwargs):
    """`cls.from_pretrained(folder)`: every weight read from the folder, and every tensor of the
    folder used but those named in `unused` (Flax paths such as 'bert/pooler/dense/kernel')."""
    with _loading_warnings() as messages:
        model = cls.from_pretrained(folder, **kwargs)
    assert not [m for m in messages if "newly initialized" in m], messages
    marker = f"were not used when initializing {cls.__name__}: "
    left_out = {"/".join(key) for m in messages if marker in m
                for key in ast.literal_eval(m.split(marker)[1].split("\n")[0])}
    assert left_out == set(unused), messages
    return model

"""Checkpoint converters as tables: one `Entry` per parameter, and the strict matching that
every converter (models/hf_bert.py, models/hf_vit.py, models/vit_npz.py) does with its table;
the flat-path helpers models/hf_gpt2.py uses too.

An `Entry` says where a parameter sits in our tree, what another format calls it, our shape, and
how the two layouts relate ('=', 'T', 'oihw' below). A converter writes its table once, as code,
and both directions (their tensors -> our tree, our tree -> their tensors) are generated from it,
so a name or a transpose cannot be right one way and wrong the other.

Strict both ways: every tensor the table names must be there with its shape and nothing else
may be (a converter passes the names it knowingly skips, such as Hugging Face's buffers); one
`CheckpointError` lists every missing, unexpected and mis-shaped tensor at once, so a user sees
the whole difference (a layer count, a head size) instead of the first symptom.

Pure NumPy: it never imports jax, train or data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

import numpy as np

from models.safetensors_file import CheckpointError, contiguous

KINDS = ("=", "T", "oihw")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One parameter: our `path` in the tree, their `name`, our `shape`, and `kind`:

      '='     the same values in the same (C) order, reshaped to their shape: [L, H] <-> [1, L, H]
              (a ViT position table), our attention bias [n, d] <-> their [n * d], our patch
              embedding [P * P * C, D] <-> a Flax conv kernel [P, P, C, D] (rows in (row,
              column, channel) order, models/vit.py eq. 1)
      'T'     transposed: ours reshaped to their shape reversed, then transposed: a Flax Dense
              kernel [in, out] <-> a PyTorch nn.Linear weight [out, in]; our attention kernel
              [H, n, d] <-> their query weight [n * d, H], our [n, d, H] <-> their output [H, n * d]
      'oihw'  our patch embedding [P * P * C, D] <-> a PyTorch conv weight [D, C, P, P]

    `their_shape` defaults to our shape ('=') or its reverse ('T'); 'oihw' needs it given.
    """

    path: tuple[str, ...]
    name: str
    shape: tuple[int, ...]
    kind: str = "="
    theirs: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {list(KINDS)}")
        if self.kind == "oihw" and (self.theirs is None or len(self.theirs) != 4):
            raise ValueError(f"{self.name}: an 'oihw' entry needs its [D, C, P, P] shape")
        if self.theirs is not None and math.prod(self.theirs) != math.prod(self.shape):
            raise ValueError(f"{self.name}: their shape {self.theirs} does not hold our "
                             f"{self.shape}")

    @property
    def their_shape(self) -> tuple[int, ...]:
        if self.theirs is not None:
            return tuple(self.theirs)
        return self.shape[::-1] if self.kind == "T" else self.shape

    def _hwio(self) -> tuple[int, int, int, int]:
        d, c, p, q = self.their_shape
        return p, q, c, d

    def to_theirs(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "=":
            return x.reshape(self.their_shape)
        if self.kind == "T":
            return x.reshape(self.their_shape[::-1]).T
        return x.reshape(self._hwio()).transpose(3, 2, 0, 1)

    def from_theirs(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "=":
            return x.reshape(self.shape)
        if self.kind == "T":
            return x.T.reshape(self.shape)
        return x.transpose(2, 3, 1, 0).reshape(self.shape)


class Table(list):
    """A converter's list of Entry rows, built with the two shorthands every table uses."""

    def add(self, path: str, hf: str, shape, kind: str = "=", theirs=None) -> None:
        """One tensor: our '/'-separated `path`, their name `hf`, our shape, the layout kind."""
        self.append(Entry(tuple(path.split("/")), hf, tuple(shape), kind, theirs))

    def dense(self, path: str, hf: str, fan_in: int, fan_out: int) -> None:
        """A linear layer: our [in, out] kernel is their [out, in] weight, and the bias."""
        self.add(f"{path}/kernel", f"{hf}.weight", (fan_in, fan_out), "T")
        self.add(f"{path}/bias", f"{hf}.bias", (fan_out,))


def mismatch_error(what: str, missing: Iterable[str], unexpected: Iterable[str],
                   misshaped: Iterable[tuple[str, tuple, tuple]]) -> CheckpointError | None:
    """One CheckpointError naming every difference (None when there is none); `misshaped`
    holds (name, expected shape, found shape)."""
    missing, unexpected, misshaped = sorted(missing), sorted(unexpected), sorted(misshaped)
    if not (missing or unexpected or misshaped):
        return None
    lines = [f"missing: {name}" for name in missing]
    lines += [f"unexpected: {name}" for name in unexpected]
    lines += [f"wrong shape: {name}: expected {list(want)}, found {list(got)}"
              for name, want, got in misshaped]
    return CheckpointError(f"{what}: {len(missing)} missing, {len(unexpected)} unexpected, "
                           f"{len(misshaped)} mis-shaped:\n  " + "\n  ".join(lines))


def unboxed(tree: Mapping) -> dict:
    """Nested plain dicts of the values of flax's nn.Partitioned / LogicallyPartitioned boxes."""
    out = {}
    for key, value in tree.items():
        if hasattr(value, "unbox"):
            value = value.unbox()
        out[str(key)] = unboxed(value) if isinstance(value, Mapping) else value
    return out


def flatten(tree: Mapping, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """{path tuple: leaf} of a nested dict."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, (*path, str(key))))
        else:
            flat[(*path, str(key))] = value
    return flat


def nest(flat: Mapping[tuple[str, ...], Any]) -> dict:
    """The nested dicts of ``{path tuple: leaf}`` (``flatten``'s inverse)."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a config's dtype name ('bfloat16' through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes  # a dependency of jax; NumPy has no bfloat16 of its own
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def tree_from_tensors(entries: Iterable[Entry], tensors: Mapping[str, np.ndarray], what: str, *,
                      prefix: str = "", ignored: Iterable[str] = (),
                      dtype: np.dtype | str = "float32") -> dict:
    """Our nested params (NumPy, `dtype`) from their tensors ``{prefix + entry.name: array}``.

    `ignored`: names that may be present and are not read. CheckpointError naming every missing,
    unexpected and mis-shaped tensor, headed by `what` (which model was expected)."""
    expected = {prefix + e.name: e for e in entries}
    ignored = set(ignored)
    misshaped = [(name, e.their_shape, tuple(np.shape(tensors[name])))
                 for name, e in expected.items()
                 if name in tensors and tuple(np.shape(tensors[name])) != e.their_shape]
    error = mismatch_error(what, (n for n in expected if n not in tensors),
                           (n for n in tensors if n not in expected and n not in ignored),
                           misshaped)
    if error is not None:
        raise error
    dtype = np.dtype(dtype)
    params: dict = {}
    for name, entry in expected.items():
        node = params
        for key in entry.path[:-1]:
            node = node.setdefault(key, {})
        node[entry.path[-1]] = contiguous(
            entry.from_theirs(np.asarray(tensors[name])).astype(dtype, copy=False))
    return params


def tensors_from_tree(entries: Iterable[Entry], params: Mapping,
                      what: str) -> dict[str, np.ndarray]:
    """Their tensors {name: NumPy array} of our params (nested dicts, boxed leaves or JAX arrays
    allowed). CheckpointError naming every missing, unexpected and mis-shaped parameter."""
    flat = flatten(unboxed(params))
    entries = {e.path: e for e in entries}
    misshaped = [("/".join(p), e.shape, tuple(np.shape(flat[p])))
                 for p, e in entries.items() if p in flat and tuple(np.shape(flat[p])) != e.shape]
    error = mismatch_error(what, ("/".join(p) for p in entries if p not in flat),
                           ("/".join(p) for p in flat if p not in entries), misshaped)
    if error is not None:
        raise error
    return {e.name: contiguous(e.to_theirs(np.asarray(flat[p]))) for p, e in entries.items()}

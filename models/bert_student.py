"""A smaller BERT made from a bigger one: DistilBERT's student (Sanh et al. 2019, Sec. 3).

The student keeps the teacher's width (hidden size, heads, feed-forward size) and has fewer
layers: the paper halves them, since at a fixed parameter budget the number of layers changes the
speed more than the width does. It also drops the segment (token-type) embeddings and the
pooler. Sharing the width lets the student start from the teacher's own weights, "taking one
layer out of two" (Sec. 3, "Student initialization"): its embeddings are the teacher's, its layer
i is teacher layer ``layers[i]``, and whatever head the teacher has (the MLM head of a pretrained
teacher, the classifier of a fine-tuned one) comes along; the next-sentence head does not (the
student trains without NSP).

    layers = select_layers(6, "every_other")                  # (1, 3, 5)
    cfg = student_config(teacher_cfg, layers, segments=False, pooler=False)
    params = student_params(teacher_params, layers, segments=False, pooler=False)

``student_params`` takes a ``BertModel``'s tree (``embeddings``, ``encoder``, ``pooler``) or one
with the encoder under ``bert`` and heads beside it (``BertForPreTraining``, the fine-tuning
heads), in either layer layout (``models.bert.with_layer_layout``), and returns the same kind of
tree in the loop layout, every array the teacher's own (NumPy or jax, not copied).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from models.bert import LAYER_PREFIX, BertConfig, with_layer_layout

EVERY_OTHER = "every_other"
NSP_HEAD = "seq_relationship"  # BertForPreTraining's next-sentence head: the student has none


def select_layers(num_teacher_layers: int, spec: str | Sequence[int]) -> tuple[int, ...]:
    """The teacher layers the student keeps, in order.

    ``'every_other'``: one layer out of two, ending with the teacher's last layer (6 -> 1, 3, 5;
    5 -> 0, 2, 4), so that the student's output layer starts as the teacher's and the cosine loss
    on the last hidden states starts from the teacher's own directions. Or explicit indices: a
    sequence of ints or a string ``'0,2,4'``, strictly increasing, each in [0, L).
    """
    if num_teacher_layers < 1:
        raise ValueError(f"the teacher has {num_teacher_layers} layers; a student needs at least 1")
    if isinstance(spec, str):
        if spec == EVERY_OTHER:
            return tuple(range((num_teacher_layers - 1) % 2, num_teacher_layers, 2))
        try:
            spec = [int(part) for part in spec.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"layers={spec!r} is neither {EVERY_OTHER!r} nor comma-separated "
                             "teacher layer indices like '0,2,4'") from None
    layers = tuple(int(i) for i in spec)
    if not layers:
        raise ValueError("layers is empty: name at least one teacher layer")
    if any(i < 0 or i >= num_teacher_layers for i in layers):
        raise ValueError(f"layers={list(layers)}: the teacher's layers are 0 .. "
                         f"{num_teacher_layers - 1}")
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise ValueError(f"layers={list(layers)} must be strictly increasing (the student runs "
                         "them in the teacher's order)")
    return layers


def student_config(teacher: BertConfig, layers: Sequence[int], *, segments: bool,
                   pooler: bool) -> BertConfig:
    """The teacher's config with ``len(layers)`` layers, without segment embeddings unless
    ``segments``, without the pooler unless ``pooler``, and without the NSP head."""
    if pooler and not teacher.pooler:
        raise ValueError("pooler=True, but the teacher has no pooler to start it from")
    if segments and not teacher.type_vocab_size:
        raise ValueError("segments=True, but the teacher has no segment embeddings")
    return dataclasses.replace(teacher, num_layers=len(layers), nsp=False, pooler=pooler,
                               type_vocab_size=teacher.type_vocab_size if segments else 0)


def _encoder_params(params: Mapping[str, Any], layers: Sequence[int], *, segments: bool,
                    pooler: bool) -> dict[str, Any]:
    """A BertModel tree -> the student's (loop layout)."""
    params = with_layer_layout(params, scan=False)
    encoder = params["encoder"]
    available = sorted(int(k[len(LAYER_PREFIX):]) for k in encoder if k.startswith(LAYER_PREFIX))
    missing = [i for i in layers if i not in available]
    if missing:
        raise ValueError(f"the teacher has no encoder layers {missing} (it has {len(available)})")
    embeddings = dict(params["embeddings"])
    if not segments:
        embeddings.pop("token_type_embeddings", None)
    student = {"embeddings": embeddings,
               "encoder": {f"{LAYER_PREFIX}{i}": encoder[f"{LAYER_PREFIX}{j}"]
                           for i, j in enumerate(layers)}}
    if pooler:
        if "pooler" not in params:
            raise ValueError("pooler=True, but the teacher's parameters have no pooler")
        student["pooler"] = params["pooler"]
    return student


def student_params(teacher_params: Mapping[str, Any], layers: Sequence[int], *, segments: bool,
                   pooler: bool) -> dict[str, Any]:
    """The student's parameters taken from the teacher's (module docstring)."""
    if "bert" not in teacher_params:
        return _encoder_params(teacher_params, layers, segments=segments, pooler=pooler)
    heads = {k: v for k, v in teacher_params.items() if k not in ("bert", NSP_HEAD)}
    return {"bert": _encoder_params(teacher_params["bert"], layers, segments=segments,
                                    pooler=pooler), **heads}

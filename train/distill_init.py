"""The student of a distillation run, made from its teacher (train/teacher.py): its model config,
its initial parameters, and the teacher's parameters as the trainer places them.

    layers, cfg = student_model_config(config, teacher)     # config.distill / config.model
    variables = init_from_teacher(variables, teacher, layers, keep_random=("predictions",))
    abstract, values = frozen_teacher(teacher_model, teacher, inputs)

The student's dimensions are the teacher's (models/bert_student.py): `config.distill.layers`
picks the teacher layers it keeps ('every_other' or a list), `segments` / `pooler` whether it keeps
the segment embeddings and the pooler (DistilBERT drops both), `init` whether it starts from the
teacher's weights ('teacher') or random ones ('random', the paper's Table 4 ablation). Settings
that are not dimensions (dropout, dtype, attention implementation, remat, scan_layers) come from
config.model, as in fine-tuning (train/finetune_init.py RUNTIME_FIELDS); the student never has
the next-sentence head.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import ml_collections
from flax import traverse_util

from models.bert import BertConfig, with_layer_layout
from models.bert_student import select_layers, student_config, student_params
from train.config import ConfigError, check_choice
from train.finetune_init import RUNTIME_FIELDS
from train.pretrained_params import put_pretrained
from train.run_config import Resolution

INITS = ("teacher", "random")
# What config.model may set for a student (its dimensions are the teacher's; it has no NSP head).
STUDENT_RUNTIME_FIELDS = tuple(f for f in RUNTIME_FIELDS if f != "nsp")


def student_model_config(config: ml_collections.ConfigDict, teacher
                         ) -> tuple[tuple[int, ...], BertConfig]:
    """(the teacher layers the student keeps, the student's BertConfig)."""
    distill = config.distill
    check_choice(config, "distill.init", INITS)
    try:
        layers = select_layers(teacher.model_config.num_layers, distill.layers)
        cfg = student_config(teacher.model_config, layers, segments=distill.segments,
                             pooler=distill.pooler)
    except ValueError as error:
        raise ConfigError(f"config.distill: {error} (teacher {teacher.source!r})") from error
    runtime = {k: v for k, v in config.model.to_dict().items() if k in STUDENT_RUNTIME_FIELDS}
    unknown = sorted(set(config.model) - set(STUDENT_RUNTIME_FIELDS) - {"name"})
    if unknown:
        raise ConfigError(f"config.model.{unknown[0]}: a student's dimensions are its teacher's "
                          "(and it has no NSP head); config.model may set only "
                          f"{sorted(STUDENT_RUNTIME_FIELDS)}")
    try:
        return layers, dataclasses.replace(cfg, **{**runtime, "nsp": False})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"config.model: {error}") from error


def init_from_teacher(variables: dict, teacher, layers, *, segments: bool, pooler: bool,
                      keep_random: tuple[str, ...] = ()) -> dict:
    """The student's random `variables` with every parameter the teacher gives in its place
    (models/bert_student.py student_params), keeping the logical-axis boxes and dtypes
    (train/pretrained_params.py put_pretrained). Top-level parameters the teacher has none of
    (`keep_random`, e.g. the MLM head of a student of MiniLM) stay random; anything else
    missing, extra or mis-shaped is a ConfigError naming every difference."""
    params = variables["params"]
    scanned = any(k[:3] == ("bert", "encoder", "layers") or k[:2] == ("encoder", "layers")
                  for k in traverse_util.flatten_dict(params))
    taken = student_params(teacher.params, layers, segments=segments, pooler=pooler)
    if "bert" in params and "bert" not in taken:  # a bare encoder (MiniLM)
        taken = {"bert": taken}
    loaded = with_layer_layout(taken, scan=scanned)
    return {**variables, "params": put_pretrained(
        params, loaded, what=f"the teacher {teacher.source!r}", fresh=keep_random)}


def frozen_teacher(init_fn, teacher) -> tuple[Any, Any]:
    """(abstract, values) of the teacher's parameters as the trainer places them
    (train/tasks/base.py frozen_params): `init_fn(rng)` is the teacher model's init, run
    abstractly only for its shapes and logical axes."""
    abstract = jax.eval_shape(init_fn, jax.random.PRNGKey(0))["params"]
    return abstract, teacher.params


def check_fingerprint(config, teacher) -> None:
    """A config that names the teacher's fingerprint gets that teacher or an error."""
    wanted = config.distill.teacher_fingerprint
    if wanted and wanted != teacher.fingerprint:
        raise ConfigError(f"config.distill.teacher_fingerprint={wanted!r}, but the teacher "
                          f"{teacher.source!r} (step {teacher.step}) has {teacher.fingerprint!r}: "
                          "its parameters changed; pin config.distill.teacher_step to the step "
                          "the run started from")


def distill_resolution(config, teacher, layers, model_config,
                       pending: bool = False) -> Resolution:
    """The student's model, and in config.distill the teacher layers it kept, the teacher's
    checkpoint step and fingerprint (which a resume must find again)."""
    values = {"distill.layers": ",".join(str(i) for i in layers),
              "distill.teacher_step": teacher.step}
    waiting = {}
    if pending:
        waiting["distill.teacher_fingerprint"] = ("sha256 of the teacher's parameters, read when "
                                                  "the run starts")
    else:
        values["distill.teacher_fingerprint"] = teacher.fingerprint
    start = "from the teacher" if config.distill.init == "teacher" else "at random"
    layers_note = (f"student: teacher layers {list(layers)} of {teacher.model_config.num_layers}"
                   f", initialised {start}"
                   f"{'' if model_config.type_vocab_size else ', no segment embeddings'}"
                   f"{'' if model_config.pooler else ', no pooler'}")
    return Resolution(model_config, values=values, pending=waiting,
                      notes=(teacher.description, layers_note),
                      resume_checks=("distill.teacher_fingerprint",))

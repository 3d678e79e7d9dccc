"""Where a distillation run's teacher comes from (`config.distill.teacher`), and what it is.

    teacher = load_teacher("workdirs/finetune_spam")     # Teacher: config, vocabulary, params
    plan = load_teacher("minilm", build=False)           # --print_config: no weights read
    teacher = load_image_teacher("workdirs/convnet_teacher")   # DeiT: an image classifier

  'minilm'    all-MiniLM-L6-v2 (data/fetching/pretrained.py; `python -m data.fetch minilm`): a
              bare encoder (models.bert.BertModel), no MLM head;
  <workdir>   a run of this project, its config.json the model that ran, its vocabulary/ the
              vocabulary, its checkpoints/ the parameters (`step`, or -1: the latest):
                configs/bert/pretrain.py  (task 'bert_pretrain')     BertForPreTraining, MLM head
                configs/bert/distill.py   (task 'distill_pretrain')  a distilled student, MLM head
                configs/bert/finetune.py  (task 'finetune')          a fine-tuning head on a task

The teacher is read from its source at every start of the distillation run, resumes included,
and never saved in the run's checkpoints: they hold what training changes (the student and its
optimizer state), while the teacher, often twice the student's size, is an input like the data.
DeiT's teacher (`load_image_teacher`, train/tasks/deit.py) is the workdir of an image
classification run of this project (configs/vit/convnet_teacher.py's convnet, or a ViT of
configs/vit/fashion_mnist.py), read the same way: its config.json the model that ran
(train/image_models.py), its checkpoints the parameters; no vocabulary.

A resume must read the same teacher as the first start, or the student would go on learning from
another model than its checkpoints learned from: the run records the `fingerprint` (sha256 of
every parameter's name, dtype, shape and bytes) and the checkpoint `step` in its config.json,
and the trainer refuses a resume whose teacher differs (train/run_config.py check_resumed). A
teacher workdir that trains on and keeps only its last checkpoints can lose the step read: then
pass that step as config.distill.teacher_step from a copy of its checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
from flax import traverse_util

from models.bert import BertConfig, with_layer_layout
from train import run_config, storage, vocabulary
from train.config import ConfigError

MINILM = "minilm"
# The tasks whose workdirs can teach, and the kind of model each trains.
KINDS = {"bert_pretrain": "pretraining", "distill_pretrain": "pretraining",
         "finetune": "finetune"}
ENCODER = "encoder"  # MiniLM: a BertModel without heads
IMAGE = "image"      # DeiT: an image classifier (task 'classify')
IMAGE_TASK = "classify"


def forward_only(cfg: Any) -> Any:
    """The teacher's model config as this run runs it, forward only: no rematerialisation, and
    cuDNN's attention (the choice of the run that trained it on a GPU) only where this machine
    has it ('auto'; XLA's, the same computation, elsewhere). Its sizes, dtype and layer layout
    stay as trained."""
    changes = {"remat": "none"} if hasattr(cfg, "remat") else {}
    if getattr(cfg, "attention_implementation", None) == "cudnn":
        changes["attention_implementation"] = "auto"
    return dataclasses.replace(cfg, **changes)


@dataclasses.dataclass
class Teacher:
    kind: str                 # 'encoder' (MiniLM), 'pretraining' (MLM head), 'finetune' (a
                              # head), 'image' (an image classifier: DeiT's teacher)
    model_config: Any         # the model that ran (a BertConfig, or for 'image' a ViTConfig or
                              # ConvNetConfig), as `forward_only` runs it
    tokenizer: Any            # its WordPiece vocabulary: the student's too (None for 'image')
    params: Any               # its parameter tree (NumPy, the config's layer layout); None: plan
    source: str               # 'minilm', or the workdir as given
    step: int                 # the checkpoint step read; -1 for MiniLM
    fingerprint: str          # sha256 of the parameters ('' in a plan)
    saved: dict               # the workdir's config.json ({} for MiniLM)

    @property
    def has_mlm_head(self) -> bool:
        return self.kind == "pretraining"

    @property
    def description(self) -> str:
        cfg = self.model_config
        if self.kind == IMAGE:
            size = sum(int(np.prod(np.shape(x))) for x in
                       traverse_util.flatten_dict(dict(self.params or {})).values())
            return (f"teacher: the {self.saved['model']['name']} classifier in {self.source}, "
                    f"step {self.step}, trained on {self.saved['data']['name']}"
                    + (f" ({size:,} parameters)" if size else ""))
        where = ("all-MiniLM-L6-v2" if self.source == MINILM else
                 f"the {self.saved['task']['name']} run in {self.source}, step {self.step}")
        return (f"teacher: {where} ({cfg.num_layers} layers, hidden {cfg.hidden_size}, "
                f"{cfg.vocab_size:,} tokens)")


def fingerprint(params: Any) -> str:
    """sha256 over every array of a parameter tree: its path, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for path, value in sorted(traverse_util.flatten_dict(dict(params), sep="/").items()):
        value = np.ascontiguousarray(np.asarray(value))
        digest.update(f"{path}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def load_teacher(source: str, step: int = -1, *, build: bool = True) -> Teacher:
    """The Teacher of `source` (module docstring). build=False (a plan): no parameters read."""
    if not source:
        raise ConfigError("config.distill.teacher is empty: use 'minilm' or the workdir of a "
                          "configs/bert/pretrain.py, finetune.py or distill.py run")
    if source == MINILM:
        if step != -1:
            raise ConfigError(f"config.distill.teacher_step={step}: MiniLM has no checkpoint "
                              "steps (leave it -1)")
        return _minilm(build)
    return _workdir(source, step, build)


def _minilm(build: bool) -> Teacher:
    from data.errors import DataError
    from data.fetching import pretrained
    from data.vocab import wordpiece
    from models.hf_bert import CheckpointError, load_hf_checkpoint, load_hf_config

    folder = pretrained.minilm_dir()
    try:
        cfg = load_hf_config(folder)
        params = load_hf_checkpoint(folder)[1] if build else None
    except CheckpointError as error:  # a file changed since the fetch checked it
        raise DataError(f"config.distill.teacher='minilm': {error}; run: python -m data.fetch "
                        "minilm --force") from error
    tokenizer = wordpiece.load_tokenizer(folder / "tokenizer.json")
    return Teacher(ENCODER, forward_only(cfg), tokenizer, params, MINILM,
                   -1, fingerprint(params) if build else "", {})


def _workdir(source: str, step: int, build: bool) -> Teacher:
    from train.checkpointing import load_params

    workdir = storage.run_path(source)
    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(f"config.distill.teacher={source!r} is neither 'minilm' nor a run's "
                          f"workdir: {saved_path} does not exist (python -m train writes it)")
    saved = run_config.read_resolved(saved_path)
    task = saved.get("task", {}).get("name")
    if task not in KINDS:
        raise ConfigError(f"config.distill.teacher={source!r}: that run's task is {task!r}; a "
                          f"teacher is a run of one of {sorted(KINDS)}")
    if task == "finetune" and saved["task"].get("features", "none") != "none":
        raise ConfigError(f"config.distill.teacher={source!r} is a feature-based run "
                          f"(task.features={saved['task']['features']!r}: a frozen encoder under "
                          "a separate classifier); teach with a fine-tuned one (features=none)")
    tokenizer = vocabulary.load(workdir, fix=f"it is the vocabulary of the teacher {source!r}: "
                                             "restore it from a copy")
    if tokenizer is None or vocabulary.kind_of(tokenizer) != "wordpiece":
        raise ConfigError(f"config.distill.teacher={source!r} keeps no WordPiece vocabulary in "
                          f"{workdir / vocabulary.FOLDER} (a workdir written before runs kept "
                          "theirs): run the teacher again with this code")
    fields = {f.name for f in dataclasses.fields(BertConfig)}
    try:
        cfg = BertConfig(**{k: v for k, v in saved["model"].items() if k in fields})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {saved_path} gives no valid BertConfig: "
                          f"{error}") from error
    if cfg.vocab_size != tokenizer.vocab_size:
        raise ConfigError(f"{saved_path} has model.vocab_size={cfg.vocab_size}, its vocabulary "
                          f"{tokenizer.vocab_size} tokens: not a finished run's config")
    step = _checkpoint_step(workdir, source, step)
    params = None
    if build:
        params = with_layer_layout(load_params(workdir, step), scan=cfg.scan_layers)
        if "bert" not in params:
            raise ConfigError(f"the checkpoint of {source!r} has no 'bert' encoder (top-level "
                              f"parameters {sorted(params)})")
    return Teacher(KINDS[task], forward_only(cfg), tokenizer, params,
                   source, step, fingerprint(params) if build else "", saved)


def _checkpoint_step(workdir, source: str, step: int) -> int:
    """The checkpoint step a teacher workdir is read at: `step`, or -1 for its latest."""
    from train.checkpointing import checkpoint_steps

    steps = checkpoint_steps(workdir)
    if not steps or (step != -1 and step not in steps):
        wanted = "a checkpoint" if step == -1 else f"the checkpoint of step {step}"
        raise ConfigError(f"config.distill.teacher={source!r} has no {wanted} (saved steps: "
                          f"{steps}); train the teacher first, or set config.distill."
                          "teacher_step to a saved step")
    return steps[-1] if step == -1 else step


def load_image_teacher(source: str, step: int = -1, *, build: bool = True) -> Teacher:
    """DeiT's teacher: the image classifier trained in the workdir `source` (a 'classify' run of
    a ViT or the convnet, train/image_models.py), at checkpoint `step` (-1: the latest).
    build=False (a plan): no parameters read."""
    from train.checkpointing import load_params
    from train.image_models import MODELS, model_config

    if not source:
        raise ConfigError("config.distill.teacher is empty: use the workdir of a classification "
                          "run, e.g. `python -m train --config configs/vit/convnet_teacher.py "
                          "--workdir workdirs/convnet_teacher`")
    workdir = storage.run_path(source)
    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(f"config.distill.teacher={source!r} is not a run's workdir: "
                          f"{saved_path} does not exist (python -m train writes it)")
    saved = run_config.read_resolved(saved_path)
    task, name = saved.get("task", {}).get("name"), saved.get("model", {}).get("name")
    if task != IMAGE_TASK or name not in MODELS:
        raise ConfigError(f"config.distill.teacher={source!r}: that run is a {task!r} run of "
                          f"model {name!r}; a DeiT teacher is a {IMAGE_TASK!r} run of one of "
                          f"{sorted(MODELS)}")
    try:
        cfg = model_config(name, saved["model"])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {saved_path} gives no valid {name} config: "
                          f"{error}") from error
    if getattr(cfg, "distill_token", False):
        raise ConfigError(f"config.distill.teacher={source!r} has a distillation token of its "
                          "own; teach with a classifier of one head (distill_token=False)")
    cfg = forward_only(cfg)
    step = _checkpoint_step(workdir, source, step)
    params = load_params(workdir, step) if build else None
    return Teacher(IMAGE, cfg, None, params, source, step,
                   fingerprint(params) if build else "", saved)

"""python -m train --config configs/bert/finetune.py:task=spam --workdir workdirs/finetune_spam

BERT fine-tuning (Devlin et al. 2019, Sec. 4) and feature-based use (Sec. 5.3, Table 7) on the
labelled data of data/pipelines/finetune_datasets.py. Fetch first: `python -m data.fetch spam
tweets brown minilm` (squad and swag come from the TFDS catalog and need a machine that can
download them).

Variants (`:arg`, comma-separated):
  task=spam|tweets|brown_genre|brown_pos|squad|swag
        spam         classify emails ham/spam                          max_seq_length 128
        tweets       classify tweets negative/neutral/positive         64
        brown_genre  classify a Brown paragraph into its 15 genres     128
        brown_pos    tag each word of a Brown sentence, 12 POS tags    64
        squad        answer span in a paragraph (TFDS 'squad' v1.1)    384
        swag         pick 1 of 4 endings (TFDS 'hellaswag': TFDS has no 'swag')  128
  init=minilm|scratch|<workdir>
        minilm   all-MiniLM-L6-v2 (6 layers, H 384); its dimensions replace config.model's
        scratch  a random encoder of config.model's size (BERT-mini: 4 x 256), vocabulary
                 trained on the task's training texts
        <dir>    the workdir of a configs/bert/pretrain.py run: its last checkpoint, dimensions
                 and vocabulary
  features=none|last|second_to_last|sum_last_four|concat_last_four
        none (default) fine-tunes everything; the others freeze the encoder and train a small
        classifier on those hidden states (tag: a 2-layer BiLSTM as in the paper); weight decay
        off (it would shrink the frozen encoder), lr 1e-3 unless lr= is given
  lr=0           peak learning rate; 0: the recipe's, 5e-5 (the paper picks from 5e-5, 3e-5,
                 2e-5 on the dev set), or 1e-3 with features=... or smoke
  epochs=0       0: the CPU budget of steps below (about 10 minutes on 2 cores); N > 0: N
                 epochs of the training split, num_steps = ceil(N * examples / batch_size)
  smoke          a seconds-long run for tests: 32 tokens, 12 steps, and with init=scratch a
                 tiny model (2 layers; 4 with the *_last_four features)
e.g. `...finetune.py:task=brown_pos,features=sum_last_four` or `...:task=spam,init=workdirs/bert`.

Recipe (paper, App. A.3): AdamW (beta2 0.999, eps 1e-6, weight decay 0.01), dropout 0.1,
linear warmup over the first 10% of the steps then linear decay to 0, batch 32, 2-4 epochs.
"""

from __future__ import annotations

import math

import ml_collections

from configs import common

TASKS = ("spam", "tweets", "brown_genre", "brown_pos", "squad", "swag")
FEATURES = ("none", "last", "second_to_last", "sum_last_four", "concat_last_four")
# Training examples of each task's train split (data/pipelines/finetune_datasets.py), for
# `epochs=N`.
TRAIN_EXAMPLES = {"spam": 4823, "tweets": 30768, "brown_genre": 13364, "brown_pos": 48654,
                  "squad": 87599, "swag": 39905}
# Per task: max_seq_length, batch_size, data source, steps of the CPU budget (epochs=0). Measured
# with init=minilm on the shared 2-core CPU (another job running): spam 5.5 s/step, tweets 2.4,
# brown_genre 5.9, brown_pos 2.3 (first step + compile 12-16 s; a full eval 0.5-2 min);
# features=* trains about 4x faster (forward only through the encoder); init=scratch 1.9 s/step
# on brown_genre.
SETTINGS = {
    "spam": dict(max_seq_length=128, batch_size=32, source="local", cpu_steps=100),
    "tweets": dict(max_seq_length=64, batch_size=32, source="local", cpu_steps=240),
    "brown_genre": dict(max_seq_length=128, batch_size=32, source="local", cpu_steps=100),
    "brown_pos": dict(max_seq_length=64, batch_size=32, source="local", cpu_steps=240),
    "squad": dict(max_seq_length=384, batch_size=32, source="tfds", cpu_steps=100),
    "swag": dict(max_seq_length=128, batch_size=16, source="tfds", cpu_steps=100),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, task="spam", init="minilm", features="none", lr=0.0,
                            epochs=0.0, smoke=False)
    if args.task not in TASKS:
        raise ValueError(f"task={args.task!r} is not one of {list(TASKS)}")
    if args.features not in FEATURES:
        raise ValueError(f"features={args.features!r} is not one of {list(FEATURES)}")
    if args.epochs < 0:
        raise ValueError(f"epochs={args.epochs} must be >= 0 (0: the CPU budget of steps)")
    settings = SETTINGS[args.task]
    feature_based = args.features != "none"

    config = ml_collections.ConfigDict()
    config.seed = 0                          # head init, dropout, data order
    config.init = args.init                  # minilm | scratch | a pretraining workdir

    config.task = ml_collections.ConfigDict()
    config.task.name = "finetune"            # train/tasks/finetune.py
    config.task.features = args.features     # none: fine-tune all; else frozen-encoder features
    config.task.feature_head = "bilstm"      # tag + features: bilstm (paper) | mlp (cheaper)
    config.task.head_hidden = 256            # units of the feature-based classifier (per LSTM
                                             # direction); unused when fine-tuning
    config.task.max_answer_length = 30       # span: longest predicted answer in pieces (BERT: 30)

    config.model = ml_collections.ConfigDict()  # init=scratch: all of it; else only the last
    config.model.name = "bert"               # six keys (dims come from the checkpoint)
    config.model.hidden_size = 256
    config.model.num_layers = 4
    config.model.num_heads = 4
    config.model.mlp_dim = 1024
    config.model.max_position_embeddings = 512
    config.model.type_vocab_size = 2
    config.model.posemb = "learned"
    config.model.nsp = False                 # no pretraining heads are built here
    config.model.dropout_rate = 0.1          # BERT fine-tuning keeps dropout 0.1
    config.model.attention_dropout_rate = 0.1
    config.model.attention_implementation = "xla"
    config.model.dtype = "float32"
    config.model.param_dtype = "float32"
    config.model.remat = "none"              # none | minimal | full: recompute layer activations
                                             # in the backward pass, less memory for more compute
    config.model.scan_layers = False         # nn.scan over the layers (models/stack.py):
                                             # one compiled layer, a leading layer axis

    config.data = ml_collections.ConfigDict()
    config.data.name = args.task             # data/pipelines/finetune_datasets.py
    config.data.source = settings["source"]  # local (python -m data.fetch) | tfds (catalog)
    config.data.train_split = "train"
    config.data.eval_split = "validation"    # model selection; report 'test' at the end
    config.data.max_seq_length = settings["max_seq_length"]  # pieces incl. [CLS]/[SEP]
    config.data.max_query_length = 64        # span: pieces kept of the question (BERT: 64)
    config.data.vocab_file = ""              # init=scratch: a vocab.txt / tokenizer.json; "":
    config.data.vocab_size = 8192            # train one of this size on the training texts (or
                                             # of all their characters, if more: see
                                             # data/vocab/wordpiece.py)
    config.data.lowercase = True             # init=scratch vocabulary casing
    config.data.batch_size = settings["batch_size"]
    config.data.eval_batch_size = 64         # eval batch (last one padded and masked)

    size = TRAIN_EXAMPLES[args.task]
    num_steps = (math.ceil(args.epochs * size / settings["batch_size"]) if args.epochs
                 else settings["cpu_steps"])
    if args.lr < 0:
        raise ValueError(f"lr={args.lr} must be > 0 (or 0: the recipe's)")
    lr = args.lr or (1e-3 if feature_based or args.smoke else 5e-5)
    config.optimizer = common.optimizer_config(  # BERT App. A.3
        name="adamw", schedule="linear", learning_rate=lr,  # warmup: 10%, shorter than the run
        warmup_steps=min(max(1, round(0.1 * num_steps)), num_steps - 1), b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=0.0 if feature_based else 0.01, clip_norm=1.0)
    config.train = common.train_config(
        num_steps=num_steps, log_every=max(1, min(50, num_steps // 10)),
        eval_every=0, checkpoint_every=max(100, num_steps // 2), keep_checkpoints=1)
    config.mesh = common.mesh_config()

    if args.smoke:  # seconds on a CPU: tiny model, short sequences, every code path once
        config.model.update(hidden_size=32, num_heads=2, mlp_dim=64, max_position_embeddings=64,
                            num_layers=4 if args.features.endswith("last_four") else 2)
        config.task.head_hidden = 16
        config.data.update(vocab_size=400, max_seq_length=32, max_query_length=8,
                           batch_size=8, eval_batch_size=16)
        config.optimizer.update(warmup_steps=2)
        config.train.update(num_steps=12, log_every=4, eval_every=0, checkpoint_every=12,
                            progress_bar=False)
    return config

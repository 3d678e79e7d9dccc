"""python -m train --config configs/bert/pretrain.py --workdir workdirs/bert_pretrain

BERT pretraining (Devlin et al. 2019): masked LM + next-sentence prediction on Brown, Austen and the
State of the Union speeches (`python -m data.fetch brown austen sotu`), with a WordPiece
vocabulary trained on their training documents. The default is sized for a 2-core CPU.

The paper's recipe at GPU-node / pod scale (docs/launch.md: commands and costs):
`:size=base,data=wikipedia` (or size=large). BERT pretrained on BooksCorpus (800M words) and
English Wikipedia (2,500M words); BooksCorpus is not in the TFDS catalog (nor on any registry
this project reads), so English Wikipedia alone stands in for both: TFDS `wikipedia/20230601.en`
(6.6M articles), prepared once as array_record where the machine can download (`tfds build
wikipedia/20230601.en --file_format=array_record`; an Apache Beam job), then read on every host.
Its articles are split into text passages and sentences as they are read
(data/corpora/wikipedia.py, data/pipelines/pretraining_stream.py): nothing to preprocess first.
The WordPiece vocabulary (30,522 tokens, BERT's size) is trained on 100,000 articles spread
over the training split, cached, or read from `--config.data.vocab_file=PATH/vocab.txt` (e.g.
Google's uncased BERT vocabulary). The last 2,000 articles are held out for evaluation.

Variants (`:arg`, comma-separated):
  size=cpu|tiny|mini|small|medium|base|large   cpu (default): 4 layers, 128 wide, 8 heads, ALiBi
                                                positions, no dropout, lr 2e-3; the others:
                                                BERT's presets (Turc et al. sizes) with BERT's
                                                learned positions and dropout 0.1; base and large
                                                with App. A.2's recipe (below)
  data=local|wikipedia local (default): Brown + Austen + SOTU; wikipedia: TFDS English
                       Wikipedia, streamed (see above)
  mask=80-10-10        % of the selected tokens replaced by [MASK] - kept the same - replaced
                       by a random token: Table 8's MASK-SAME-RND columns (its rows: 80-10-10,
                       100-0-0, 80-0-20, 80-20-0, 0-20-80, 0-0-100)
  nsp=on|off           next-sentence prediction (off: MLM only)
  inputs=segment_pair|full_sentences|doc_sentences
                       BERT's sentence pairs, or RoBERTa's packed sentences (no NSP)
  posemb=learned|sinusoidal|rope|alibi|none    default: alibi at size=cpu, learned otherwise
  whole_word           whole-word masking
  smoke                a seconds-long run for tests
e.g. `--config configs/bert/pretrain.py:mask=100-0-0` or `...:inputs=full_sentences,nsp=off`.

App. A.2's recipe (size=base|large): 1,000,000 steps, Adam (0.9, 0.999) with lr 1e-4, 10,000
warmup steps and linear decay, weight decay 0.01, dropout 0.1; 90% of the steps on 128-token
sequences, the last 10% on 512-token ones. The batch holds ~128k tokens throughout: App. A.2
gives 256 sequences x 512 tokens = 128,000 tokens a batch and "approximately 40 epochs over the
3.3 billion word corpus", and App. C.1 counts 128,000 words/batch x 1,000,000 steps; with 256
sequences of 128 tokens for 90% of the steps the run would see a third of that. So phase 1
batches 1,024 sequences of 128 tokens (20 predictions each) and phase 2 256 of 512 (80).
Gradient clipping at global norm 1 and Adam's eps 1e-6 are not in the paper: they are the
released code's (its optimization.py), as is decoupled weight decay.
"""

from __future__ import annotations

import ml_collections

from configs import common
from models.sizes import BERT_SIZES

TABLE8_MASKS = ("80-10-10", "100-0-0", "80-0-20", "80-20-0", "0-20-80", "0-0-100")
INPUT_FORMATS = ("segment_pair", "full_sentences", "doc_sentences")
DATA = ("local", "wikipedia")
WIKIPEDIA = "wikipedia/20230601.en"   # the newest English dump in TFDS 4.9.10's catalog
WIKIPEDIA_EVAL_ARTICLES = 2000        # held out at the end of its only split, 'train'
SMOKE_EVAL_ARTICLES = 8               # smoke: of the few dozen articles of TFDS's mock data


def parse_mask(spec: str) -> tuple[float, float, float]:
    """'MASK-SAME-RND' in %, the column order of BERT Table 8 -> (mask_prob, random_prob,
    keep_prob), the data fields: '80-0-20' -> (0.8, 0.2, 0.0), 20% replaced by random tokens."""
    parts = spec.split("-")
    try:
        mask, same, random = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"mask={spec!r} must look like 80-10-10 ([MASK]-same-random in %, "
                         "as BERT Table 8's MASK, SAME, RND columns)") from None
    if mask + same + random != 100 or min(mask, same, random) < 0:
        raise ValueError(f"mask={spec!r}: the three percentages must be >= 0 and sum to 100")
    return mask / 100, random / 100, same / 100


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, size="cpu", data="local", mask="80-10-10", nsp="on",
                            inputs="segment_pair", posemb="", whole_word=False, smoke=False)
    if args.size not in ("cpu", *BERT_SIZES):
        raise ValueError(f"size={args.size!r} is not one of {['cpu', *BERT_SIZES]}")
    if args.data not in DATA:
        raise ValueError(f"data={args.data!r} is not one of {list(DATA)}")
    if args.data == "wikipedia" and args.inputs == "full_sentences":
        raise ValueError("inputs=full_sentences packs across documents, which the Wikipedia "
                         "stream does not: use segment_pair or doc_sentences")
    if args.inputs not in INPUT_FORMATS:
        raise ValueError(f"inputs={args.inputs!r} is not one of {list(INPUT_FORMATS)}")
    if args.nsp not in ("on", "off"):
        raise ValueError(f"nsp={args.nsp!r} must be on or off")
    nsp = args.nsp == "on"
    if nsp and args.inputs != "segment_pair":
        raise ValueError(f"inputs={args.inputs} has no sentence pairs: use nsp=off with it "
                         "(RoBERTa trains these formats on MLM only)")
    mask_prob, random_prob, keep_prob = parse_mask(args.mask)

    config = ml_collections.ConfigDict()
    config.seed = 0                          # parameter init, dropout, pairs and masks

    config.task = ml_collections.ConfigDict()
    config.task.name = "bert_pretrain"       # train/tasks/bert_pretrain.py

    config.model = ml_collections.ConfigDict()
    config.model.name = "bert"               # models/bert_pretraining.py BertForPreTraining
    # Sized by measurement for 45 minutes on a 2-core CPU (docs/models.md): 128 wide makes 3x
    # the updates of 256 wide (BERT-mini). With learned positions the model sits on the MLM
    # plateau (it guesses frequent pieces instead of reading the context) for thousands of
    # steps; ALiBi's fixed bias towards nearby tokens gets it off sooner, and the more so the
    # more heads, since the steepest ALiBi slope is 2^(-8/A): 1/16 per token with 2 heads, 1/2
    # with 8. Dropout is off (BERT: 0.1): the run underfits the corpus.
    config.model.hidden_size = 128           # H
    config.model.num_layers = 4              # L
    config.model.num_heads = 8               # A (16 per head; BERT: 64)
    config.model.mlp_dim = 512               # 4H
    config.model.max_position_embeddings = 512  # rows of the learned / sinusoidal table
    config.model.type_vocab_size = 2         # segments A and B
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    config.model.posemb = args.posemb or ("alibi" if args.size == "cpu" else "learned")
                                             # learned (BERT)|sinusoidal|rope|alibi|none
    config.model.nsp = nsp                   # build and train the next-sentence head
    config.model.attention_implementation = "xla"  # xla | cudnn (GPU) | auto
    config.model.dtype = "float32"           # compute dtype
    config.model.param_dtype = "float32"     # parameter and optimizer-state dtype
    config.model.remat = "none"              # none | minimal | full: recompute layer activations
                                             # in the backward pass, less memory for more compute
    config.model.scan_layers = False         # nn.scan over the layers (models/stack.py):
                                             # one compiled layer, a leading layer axis
    if args.size != "cpu":
        config.model.update(BERT_SIZES[args.size], dropout_rate=0.1, attention_dropout_rate=0.1)

    config.data = ml_collections.ConfigDict()
    config.data.names = ("brown", "austen", "sotu")  # python -m data.fetch NAME, documents of all
    config.data.source = "local"             # local (data/ builders) | tfds (one Wikipedia dump)
    config.data.train_split = "train"
    config.data.eval_split = "validation"    # held-out documents
    config.data.vocab_file = ""              # an existing vocab.txt / tokenizer.json; "": train one
    config.data.vocab_size = 8192            # WordPiece vocabulary trained on the train split (or
                                             # of all its characters, if more: see
                                             # data/vocab/wordpiece.py)
    config.data.vocab_sample_documents = 0   # tfds: articles the vocabulary is trained on (0 local)
    config.data.vocab_max_characters = 0     # characters it keeps, the most frequent; words with
                                             # others are [UNK] (0: all; data/vocab/alphabet.py)
    config.data.shuffle_window = 0           # tfds: examples shuffled together in the stream
                                             # (0 local: the whole corpus is shuffled)
    config.data.worker_count = 0             # tfds: processes making the stream's batches (0: this
                                             # one; data/pipelines/workers.py)
    config.data.lowercase = True             # uncased (True) or cased (False) vocabulary
    config.data.input_format = args.inputs   # segment_pair (BERT) | full_sentences | doc_sentences
    config.data.max_seq_length = 128         # tokens per example, [CLS]/[SEP] included
    # chance of a shorter target length (BERT: 0.1); only segment_pair has target lengths (the
    # packed formats fill every row), so 0 for them
    config.data.short_seq_prob = 0.1 if args.inputs == "segment_pair" else 0.0
    config.data.dupe_factor = 0              # 0: new pairs and masks every epoch (dynamic, RoBERTa);
                                             # N: N fixed copies with different masks (static, BERT)
    config.data.select_prob = 0.15           # fraction of tokens chosen for prediction
    config.data.mask_prob = mask_prob        # of the chosen: replaced by [MASK] ...
    config.data.random_prob = random_prob    # ... by a random token ...
    config.data.keep_prob = keep_prob        # ... left unchanged
    config.data.max_predictions = 20         # predictions per sequence (BERT: 20 at 128)
    config.data.whole_word = args.whole_word  # choose whole words (all their pieces) at once
    config.data.batch_size = 32              # global batch of sequences (CPU: more updates per
                                             # FLOP than 64 in a 45-minute budget)
    config.data.eval_batch_size = 128        # eval batch (last one padded and masked)
    config.data.phase2_fraction = 0.0        # last fraction of steps at phase2_max_seq_length
                                             # (BERT: 0.1 at 512); same optimizer state
    config.data.phase2_max_seq_length = 512
    config.data.phase2_max_predictions = 80  # BERT: 80 at 512
    config.data.phase2_batch_size = 32       # global batch of phase 2 (BERT: 256 of 512 tokens)

    config.optimizer = common.optimizer_config(  # App. A.2; eps, clipping: the released code
        name="adamw", schedule="linear", learning_rate=2e-3, warmup_steps=300,
        b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, clip_norm=1.0)
    config.train = common.train_config(  # ~1.8 steps/s: 40 minutes measured on a 2-core CPU
        num_steps=4200, log_every=100, eval_every=1000, checkpoint_every=1000)
    config.mesh = common.mesh_config()

    if args.size in ("tiny", "mini", "small", "medium"):
        config.optimizer.learning_rate = 1e-3  # as probed with learned positions (docs/models.md)
    if args.size in ("base", "large"):  # the paper's recipe at full scale (docstring)
        config.data.update(vocab_size=30522, batch_size=1024, phase2_fraction=0.1,
                           phase2_batch_size=256, eval_batch_size=256)
        config.optimizer.update(learning_rate=1e-4, warmup_steps=10_000)
        config.train.update(num_steps=1_000_000, eval_every=10_000, checkpoint_every=10_000)
    if args.data == "wikipedia":
        config.data.update(names=(WIKIPEDIA,), source="tfds",
                           train_split=f"train[:-{WIKIPEDIA_EVAL_ARTICLES}]",
                           eval_split=f"train[-{WIKIPEDIA_EVAL_ARTICLES}:]",
                           vocab_sample_documents=100_000, shuffle_window=10_000,
                           vocab_max_characters=1000)  # HF's BertWordPieceTokenizer's default

    if args.smoke:  # a few seconds on a CPU: tiny model, few steps, every code path once
        config.model.update(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                            max_position_embeddings=64)
        config.data.update(vocab_size=400, max_seq_length=32, max_predictions=5, batch_size=8,
                           eval_batch_size=16, phase2_max_seq_length=64,
                           phase2_max_predictions=10, phase2_batch_size=4)
        if args.data == "wikipedia":  # a few dozen mock articles, the last 8 held out
            config.data.update(vocab_sample_documents=20, shuffle_window=16,
                               train_split=f"train[:-{SMOKE_EVAL_ARTICLES}]",
                               eval_split=f"train[-{SMOKE_EVAL_ARTICLES}:]")
        config.optimizer.warmup_steps = 5
        config.train.update(num_steps=12, log_every=4, eval_every=6, checkpoint_every=6,
                            keep_checkpoints=2, progress_bar=False)
    return config

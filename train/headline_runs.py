"""The single runs whose numbers the docs quote, by the name their record is committed under
(notebooks/results/runs/NAME/record.json), with the command that makes each.

`python -m train.records save SOURCE NAME` commits a finished run's record under its name (and
checks that it ran this command); `python -m train.tables` renders the docs' tables from the
committed records, and names the command for any that is not recorded yet.
"""

from __future__ import annotations

import dataclasses
import shlex

from train import recipe_runs


@dataclasses.dataclass(frozen=True)
class HeadlineRun:
    name: str
    meaning: str
    command: str      # as the docs give it; its --workdir / --json is what `save` reads
    fetch: str = ""   # the datasets it reads: `python -m data.fetch FETCH` first

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    @property
    def source(self) -> str:
        """Where the command leaves its record: the --workdir, or the benchmark's --json file."""
        argv = self.argv
        for option in ("--workdir", "--json"):
            if option in argv:
                return argv[argv.index(option) + 1]
        raise ValueError(f"{self.name}: its command names no --workdir or --json")

    @property
    def save_command(self) -> str:
        return f"python -m train.records save {self.source} {self.name}"


def _finetune(name: str, variant: str, meaning: str) -> HeadlineRun:
    return HeadlineRun(
        name, meaning,
        f"python -m train --config configs/bert/finetune.py:{variant},init=minilm "
        f"--config.data.eval_split=test --workdir workdirs/{name}",
        fetch="minilm " + ("spam" if "spam" in variant else
                           "tweets" if "tweets" in variant else "brown"))


def _distil_speed(task: str, shape: str) -> HeadlineRun:
    """The inference speed of MiniLM and its 3-layer DistilBERT student on `task`'s inputs."""
    return HeadlineRun(
        f"bench_distil_{task}", f"DistilBERT student (3 of MiniLM's 6 layers) beside its teacher: "
                                f"inference sequences/s on {task} ({shape}, batch 64)",
        f"python -m benchmarks.distill_speed --task {task} --json workdirs/bench/distil_{task}.json",
        fetch="minilm")


def _gpu_row(name: str, row: str, model: str, attention: str, file: str) -> HeadlineRun:
    """A row of benchmarks/gpu_table.sh (bfloat16, attention dropout 0, 5 rounds of 10 steps) on
    one GPU (its record names which), without the peer."""
    return HeadlineRun(
        name, f"the GPU table's {row} on one GPU, MFU against its data-sheet peak",
        f"python -m benchmarks.train_step {model} --dtype bfloat16 --attention {attention} "
        f"--attention_dropout 0 --steps 10 --repeats 5 --peer none "
        f"--json workdirs/bench/gpu/{file}.json")


# What `make bench` runs (its default BENCH_ARGS), the record in its --json file.
_BENCH = ("python -m benchmarks.train_step {model} --steps 3 --repeats 5 "
          "--json workdirs/bench/{file}.json")

RUNS = {run.name: run for run in (
    HeadlineRun("demo", "`make demo`: the default ViT on Fashion-MNIST, test accuracy and time",
                "python -m train --config configs/vit/fashion_mnist.py "
                "--workdir workdirs/vit_fashion_mnist", fetch="fashion_mnist"),
    HeadlineRun("convnet_teacher", "DeiT's teacher: a small residual convnet on Fashion-MNIST, "
                                   "test accuracy (DeiT Table 3's teacher row)",
                "python -m train --config configs/vit/convnet_teacher.py "
                "--workdir workdirs/convnet_teacher", fetch="fashion_mnist"),
    HeadlineRun("translate", "the CPU Transformer, English -> Spanish Bible verses: test BLEU, "
                             "perplexity, token accuracy",
                "python -m train --config configs/transformer/translate.py "
                "--workdir workdirs/transformer_en_es", fetch="bible_en_es"),
    HeadlineRun("translate_row_E", "the same with learned positions (Table 3, row E)",
                "python -m train --config configs/transformer/translate.py:row=E "
                "--workdir workdirs/transformer_en_es_E", fetch="bible_en_es"),
    HeadlineRun("bert_pretrain", "BERT pretraining (MLM + NSP) on Brown, Austen and SOTU: "
                                 "validation MLM and NSP accuracy at every eval",
                "python -m train --config configs/bert/pretrain.py "
                "--workdir workdirs/bert_pretrain", fetch="brown austen sotu"),
    _finetune("finetune_spam", "task=spam", "MiniLM fine-tuned on spam, test accuracy"),
    _finetune("finetune_tweets", "task=tweets", "MiniLM fine-tuned on 3-class tweet sentiment"),
    _finetune("finetune_brown_genre", "task=brown_genre",
              "MiniLM fine-tuned on the Brown genre of a paragraph (15 classes)"),
    _finetune("finetune_brown_pos", "task=brown_pos",
              "MiniLM fine-tuned for Brown POS tagging, test token accuracy"),
    _finetune("finetune_brown_pos_features", "task=brown_pos,features=concat_last_four",
              "frozen MiniLM, a BiLSTM on its last four layers, Brown POS tagging"),
    HeadlineRun("baselines", "majority class and bag-of-words logistic regression of the "
                             "fine-tuning tasks (test split)",
                "python -m train.baselines --task all --workdir workdirs/baselines",
                fetch="spam tweets brown"),
    HeadlineRun("lm_english", "the CPU decoder-only LM on English documents: validation "
                              "perplexity and bits per byte, time, MFU",
                "python -m train --config configs/lm/english.py --workdir workdirs/lm_english",
                fetch="english_lm"),
    HeadlineRun("lm_english_v1024", "the same LM on a 1,024-token BPE, its steps filling "
                                    "30 minutes of the 2-core CPU",
                "python -m train --config configs/lm/english.py:vocab=1024 "
                "--config.train.num_steps=3800 --workdir workdirs/lm_english_v1024",
                fetch="english_lm"),
    *(HeadlineRun(f"lm_probe_lr{lr}", f"the 1,024-token LM for 1,000 steps at peak learning "
                                      f"rate {lr} (the probe of the peak learning rate)",
                  f"python -m train --config configs/lm/english.py:vocab=1024 "
                  f"--config.train.num_steps=1000 --config.optimizer.learning_rate={lr} "
                  f"--config.optimizer.end_learning_rate={end} --workdir workdirs/lm_probe_lr{lr}",
                  fetch="english_lm") for lr, end in (("1.5e-3", "1.5e-4"), ("3e-3", "3e-4"))),
    HeadlineRun("lm_english_v512", "the same LM on a 512-token BPE, its steps filling 30 "
                                   "minutes of the 2-core CPU",
                "python -m train --config configs/lm/english.py:vocab=512 "
                "--config.train.num_steps=4000 --workdir workdirs/lm_english_v512",
                fetch="english_lm"),
    HeadlineRun("lm_kneser_ney", "the interpolated Kneser-Ney trigram on the same BPE tokens: "
                                 "validation perplexity and bits per byte",
                "python -m train.kneser_ney --config configs/lm/english.py "
                "--workdir workdirs/lm_kneser_ney", fetch="english_lm"),
    HeadlineRun("lm_kneser_ney_v1024", "the same trigram on the tokens of a 1,024-token BPE",
                "python -m train.kneser_ney --config configs/lm/english.py:vocab=1024 "
                "--workdir workdirs/lm_kneser_ney_v1024", fetch="english_lm"),
    HeadlineRun("lm_kneser_ney_v512", "the same trigram on the tokens of a 512-token BPE",
                "python -m train.kneser_ney --config configs/lm/english.py:vocab=512 "
                "--workdir workdirs/lm_kneser_ney_v512", fetch="english_lm"),
    HeadlineRun("bench_lm_decode", "decoding speed: our cached generate beside Hugging Face's "
                                   "FlaxGPT2LMHeadModel.generate on the same weights, greedy "
                                   "and sampling, batch 1 and 8, with the memory-bandwidth "
                                   "bound",
                "python -m benchmarks.lm_decode --json workdirs/bench/lm_decode.json"),
    HeadlineRun("bench_bert_base", "`make bench`: BERT-base train step (seq 128, batch 8) "
                                   "beside Hugging Face's Flax BERT",
                _BENCH.format(model="--model bert --size base --seq 128 --batch 8",
                              file="bert_base_128")),
    HeadlineRun("bench_vit_b16", "`make bench`: ViT-B/16 train step (224x224, batch 8) beside "
                                 "Hugging Face's Flax ViT",
                _BENCH.format(model="--model vit --size B/16 --batch 8", file="vit_b16")),
    _gpu_row("bench_gpu_bert_base_128", "BERT-base row (seq 128, batch 256, bfloat16)",
             "--model bert --size base --seq 128 --batch 256", "auto", "bert_base_128"),
    _gpu_row("bench_gpu_bert_large_512", "BERT-large row (seq 512, batch 32, bfloat16)",
             "--model bert --size large --seq 512 --batch 32", "auto", "bert_large_512"),
    _gpu_row("bench_gpu_vit_b16", "ViT-B/16 row (batch 256, bfloat16)",
             "--model vit --size B/16 --batch 256", "auto", "vit_b16"),
    _gpu_row("bench_gpu_vit_b16_xla", "ViT-B/16 row (batch 256, attention by XLA's einsums, as "
             "the first GPU session ran it before cuDNN's kernel took odd lengths, bfloat16)",
             "--model vit --size B/16 --batch 256", "xla", "vit_b16"),
    HeadlineRun("bench_mae_step", "the MAE pretraining step, 3 in 4 patches masked, against "
                                  "the same model encoding every patch with mask tokens "
                                  "(target >= 2.5x)",
                "python -m benchmarks.mae_step --steps 3 --repeats 5 "
                "--json workdirs/bench/mae_step.json"),
    _distil_speed("spam", "seq 128"),
    _distil_speed("tweets", "seq 64, as Brown POS"),
    HeadlineRun("bench_marian_decode", "beam-search translation (beam 4, batch 1 and 32) by an "
                                       "OPUS-MT-sized Transformer beside Hugging Face's "
                                       "FlaxMarianMTModel.generate, the same weights",
                "python -m benchmarks.marian_decode --size opus --batches 1 32 --beam 4 "
                "--repeats 5 --json workdirs/bench/marian_decode.json"),
    HeadlineRun("bench_input_pipeline", "examples per second one pinned CPU core makes through "
                                        "each paper-scale recipe's training pipeline, on "
                                        "stand-ins of real JPEGs and prose, and the cores a "
                                        "host needs to keep up",
                "python -m benchmarks.input_pipeline --seconds 30 "
                "--json workdirs/bench/input_pipeline.json", fetch="english_lm bible_en_es"),
    *(HeadlineRun(run.name, f"{run.recipe.name}: the recipe's model at its real size, "
                            f"{run.batch_shape()} (one GPU's share of an 8-GPU node), run on "
                            "one GPU with TFDS's mock data: step, MFU, device memory",
                  run.command) for run in recipe_runs.RUNS),
)}

"""Small generated fine-tuning datasets of every kind (data/pipelines/finetune_datasets.py KINDS),
for the task tests: learnable in a few dozen steps (a label shows in the words a text is made
of), and registered under `generated_<kind>` with a 'train' and a 'validation' split."""

from __future__ import annotations

import numpy as np

from data.pipelines import finetune_datasets as fd

WORDS = ("red blue green black white small large quick slow happy sad north south east west "
         "river stone cloud tree house").split()
POOLS = (WORDS[:10], WORDS[10:])  # a label shows in which words a text is made of
NUM_LABELS = {"classify": 2, "pair_classify": 2, "tag": 3, "span": 0, "multiple_choice": 0}


def sentence(rng, low=4, high=10, pool=WORDS) -> str:
    return " ".join(rng.choice(pool, rng.integers(low, high)))


def generate(kind: str, n: int, seed: int) -> list[dict]:
    """`n` examples of `kind` in its raw form."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        label = int(rng.integers(2))
        if kind == "classify":
            out.append({"text": sentence(rng, pool=POOLS[label]), "label": label})
        elif kind == "pair_classify":
            out.append({"text_a": sentence(rng), "text_b": sentence(rng, pool=POOLS[label]),
                        "label": label})
        elif kind == "tag":
            words = list(rng.choice(WORDS, rng.integers(3, 9)))
            out.append({"words": words, "tags": [WORDS.index(w) % 3 for w in words]})
        elif kind == "span":
            words = list(rng.choice(WORDS, rng.integers(5, 12)))
            words.insert(int(rng.integers(len(words) + 1)), "zebra")
            context = " ".join(words)
            out.append({"question": "where is the zebra", "context": context,
                        "answers": [(context.index("zebra"), "zebra")]})
        else:
            right = int(rng.integers(3))
            choices = [sentence(rng, 2, 5, POOLS[int(i == right)]) for i in range(3)]
            out.append({"context": sentence(rng), "choices": choices, "label": right})
    return out


def register(kind: str, n_train: int = 96, n_eval: int = 32) -> str:
    """Registers (or replaces) the dataset `generated_<kind>`; returns its name."""
    name = f"generated_{kind}"
    data = {"train": generate(kind, n_train, 0), "validation": generate(kind, n_eval, 1)}
    fd.register(fd.FinetuneDataset(
        name, kind, tuple(f"label{i}" for i in range(NUM_LABELS[kind])),
        ("train", "validation"), lambda split, source, data_dir: data[split],
        num_choices=3 if kind == "multiple_choice" else 0), replace=True)
    return name

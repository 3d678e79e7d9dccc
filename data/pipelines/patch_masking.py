"""Masked-autoencoder masks, drawn in the pipeline: a random order of each image's patches.

MAE (He et al. 2022, Sec. 3, "Simple implementation") shuffles each image's list of N patches at
random and keeps the first K = int(N (1 - r)) for the encoder: a random subset of size K,
sampled without replacement. Here the pipeline draws the shuffle, one uniformly random
permutation of 0 .. N-1 per image ('patch_order', int32 [b, N]); the model keeps its first K,
with r, the masking ratio, from the model's config (models/mae.py `split_patches`). So:
  - the masks are part of the batch: gradient accumulation splits them with their images, and
    the k microbatches see exactly the masks of the one big batch (train/train_step.py);
  - each batch's permutations come from an rng seeded with (seed, global batch index) through
    grain's `random_map`, reproducible and restored with the iterator's state;
  - the eval pipeline (one pass, seed fixed by the task) masks the test images alike at every
    eval of every run: evals compare;
  - one batch serves every masking ratio (the benchmark times two models on the same batch).
"""

from __future__ import annotations

import numpy as np

KEY = "patch_order"


def patch_orders(rng: np.random.Generator, batch_size: int, num_patches: int) -> np.ndarray:
    """int32 [batch_size, num_patches]: each row an independent, uniformly random permutation
    of 0 .. num_patches - 1."""
    rows = np.broadcast_to(np.arange(num_patches, dtype=np.int32), (batch_size, num_patches))
    return rng.permuted(rows, axis=1)


class AddPatchOrder:
    """A grain random_map transform: the batch with KEY added, one permutation per row."""

    def __init__(self, num_patches: int):
        if num_patches < 2:
            raise ValueError(f"num_patches={num_patches}: masking needs at least 2 patches")
        self.num_patches = num_patches

    def __call__(self, batch: dict, rng: np.random.Generator) -> dict:
        return {**batch, KEY: patch_orders(rng, len(batch["mask"]), self.num_patches)}

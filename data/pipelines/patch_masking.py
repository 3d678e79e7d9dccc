"""Masked-autoencoder masks, drawn in the pipeline: a random order of each image's patches.

MAE (He et al. 2022, Sec. 3, "Simple implementation") shuffles each image's list of N patches at
random and keeps the first K = int(N (1 - r)) for the encoder: a random subset of size K,
sampled without replacement. Here the pipeline draws the shuffle, one uniformly random
permutation of 0 .. N-1 per image ('patch_order', int32 [b, N]); the model keeps its first K,
with r, the masking ratio, from the model's config (models/mae.py `split_patches`). So:
  - the masks are part of the batch: gradient accumulation splits them with their images, and
    the k microbatches see exactly the masks of the one big batch (train/train_step.py);
  - in training, each batch's permutations come from an rng seeded with (seed, global batch
    index) through grain's `random_map` (`AddPatchOrder`), reproducible and restored with the
    iterator's state, new in every epoch;
  - in an eval pass, each image's permutation comes from an rng seeded with (seed, the example's
    index) (`ExamplePatchOrder`): a test image is masked alike at every eval of every run,
    whatever the eval batch size, the padding of the last batch or the number of processes;
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


class ExamplePatchOrder:
    """Example indices [b] -> int32 [b, num_patches]: the permutation of example i drawn from
    an rng seeded with (seed, i), the same whichever batch the example is in."""

    def __init__(self, num_patches: int, seed: int):
        if num_patches < 2:
            raise ValueError(f"num_patches={num_patches}: masking needs at least 2 patches")
        self.num_patches, self.seed = num_patches, int(seed)

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        return np.stack([np.random.default_rng((self.seed, int(i))).permutation(
            self.num_patches) for i in indices]).astype(np.int32)


class AddPatchOrder:
    """A grain random_map transform: the batch with KEY added, one permutation per row."""

    def __init__(self, num_patches: int):
        if num_patches < 2:
            raise ValueError(f"num_patches={num_patches}: masking needs at least 2 patches")
        self.num_patches = num_patches

    def __call__(self, batch: dict, rng: np.random.Generator) -> dict:
        return {**batch, KEY: patch_orders(rng, len(batch["mask"]), self.num_patches)}

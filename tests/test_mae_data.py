"""The masked autoencoder's masks drawn in the image pipeline (data/pipelines/patch_masking.py)
and the training subsets of a limited-labels run (data/pipelines/subsets.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from data.errors import DataError
from data.pipelines import images as image_data
from data.pipelines import subsets
from data.pipelines.patch_masking import KEY, ExamplePatchOrder, patch_orders
from data.pipelines.sharding import seeds


class _Source:
    """An in-memory labelled image source: example i is an image filled with i."""

    def __init__(self, labels):
        self.labels = list(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"image": np.full((8, 8, 1), i % 256, np.uint8), "label": self.labels[i]}


def _batches(source, *, train, batch_size, seed=0, **kwargs):
    return image_data.image_batches(source, batch_size=batch_size, train=train, seed=seed,
                                    image_shape=(8, 8, 1), mean=(0.5,), std=(0.25,),
                                    patch_order=16, **kwargs)


def test_patch_orders_are_uniform_permutations():
    orders = patch_orders(np.random.default_rng(0), 4000, 5)
    assert orders.dtype == np.int32 and orders.shape == (4000, 5)
    assert (np.sort(orders, axis=1) == np.arange(5)).all()
    first = np.bincount(orders[:, 0], minlength=5) / 4000  # each patch first 1/5 of the time
    np.testing.assert_allclose(first, 0.2, atol=0.03)
    # every one of the 5! orders equally likely (a rotation of 0..4, whose visible patches are
    # always neighbours, passes the check above): Pearson's chi-square over the 120 orders
    index = {order: i for i, order in enumerate(itertools.permutations(range(5)))}
    counts = np.bincount([index[tuple(order)] for order in orders.tolist()], minlength=120)
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_training_masks_are_seeded_new_each_batch_and_resume_with_the_iterator():
    source = _Source(range(40))
    a, b = _batches(source, train=True, batch_size=8), _batches(source, train=True, batch_size=8)
    first = [next(a)[KEY] for _ in range(3)]
    for order in first:
        assert order.shape == (8, 16) and (np.sort(order, axis=1) == np.arange(16)).all()
    np.testing.assert_array_equal(np.stack(first), np.stack([next(b)[KEY] for _ in range(3)]))
    assert not np.array_equal(first[0], first[1])
    other = next(_batches(source, train=True, batch_size=8, seed=1))[KEY]
    assert not np.array_equal(other, first[0])
    state = a.get_state()
    expected = next(a)[KEY]
    resumed = _batches(source, train=True, batch_size=8)
    resumed.set_state(state)
    np.testing.assert_array_equal(next(resumed)[KEY], expected)


def test_eval_masks_belong_to_the_example_not_to_the_batching():
    """In an eval pass a test image gets the same patch order whatever the batch size, padding
    and process count: its own, from (seed, its index)."""
    source = _Source(range(23))

    def orders(batch_size, processes=1):
        out = {}
        for index in range(processes):
            for batch in _batches(source, train=False, batch_size=batch_size,
                                  process_index=index, process_count=processes):
                for image, order, real in zip(batch["image"], batch[KEY], batch["mask"]):
                    if real:
                        out[int(round(image[0, 0, 0] * 0.25 * 255 + 0.5 * 255))] = order
        return out

    whole = orders(23)
    assert sorted(whole) == list(range(23))
    for batch_size, processes in ((5, 1), (4, 3)):
        split = orders(batch_size, processes)
        assert sorted(split) == list(range(23))
        for i in range(23):
            np.testing.assert_array_equal(split[i], whole[i])
    np.testing.assert_array_equal(whole[7], ExamplePatchOrder(16, seeds(0, 3)[2])(
        np.array([7]))[0])


def test_subsets_draw_the_fraction_balanced_or_at_random_with_the_seed():
    labels = np.repeat(np.arange(10), [60, 60, 60, 60, 60, 60, 60, 60, 60, 80])
    balanced = subsets.choose(labels, 0.1, "balanced", seed=3)
    assert len(balanced) == 60  # round(0.1 x 620 / 10) = 6 of every class
    assert (np.bincount(labels[balanced], minlength=10) == 6).all()
    assert np.array_equal(balanced, np.sort(balanced)) and len(set(balanced)) == len(balanced)
    np.testing.assert_array_equal(balanced, subsets.choose(labels, 0.1, "balanced", seed=3))
    assert not np.array_equal(balanced, subsets.choose(labels, 0.1, "balanced", seed=4))
    random = subsets.choose(labels, 0.25, "random", seed=0)
    assert len(random) == 155 and len(set(random)) == 155 and random.max() < 620
    np.testing.assert_array_equal(subsets.choose(labels, 1.0, "random", seed=0), np.arange(620))
    with pytest.raises(DataError, match="gives no example of each class"):
        subsets.choose(labels, 0.001, "balanced", seed=0)
    with pytest.raises(DataError, match="class 0 has 60 examples, fewer than the 61"):
        subsets.choose(labels, 0.99, "balanced", seed=0)
    with pytest.raises(DataError, match=r"fraction=0 must be in \(0, 1\]"):
        subsets.choose(labels, 0, "random", seed=0)


def test_a_subset_is_a_source_of_the_chosen_examples():
    source = _Source([i % 3 for i in range(30)])
    np.testing.assert_array_equal(subsets.labels_of(source, chunk=7), source.labels)
    chosen = subsets.choose(subsets.labels_of(source), 0.2, "balanced", seed=0)
    subset = subsets.Subset(source, chosen)
    assert len(subset) == 6
    assert [int(e["image"][0, 0, 0]) for e in subset.__getitems__([0, 5])] == \
        [chosen[0], chosen[5]]
    batch = next(image_data.image_batches(subset, batch_size=6, train=False, seed=0,
                                          image_shape=(8, 8, 1), mean=(0.0,), std=(1 / 255,)))
    np.testing.assert_array_equal(batch["image"][:, 0, 0, 0], chosen)
    np.testing.assert_array_equal(batch["label"], np.asarray(source.labels)[chosen])

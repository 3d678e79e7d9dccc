"""data/pipelines/sharding.py, the one home of what every pipeline shares: its seeds, the eval
padding and batch count, the checks of batch size and process index, the source's name."""

from __future__ import annotations

import math
import types

import pytest

from data.errors import DataError
from data.pipelines.sharding import (check_sharding, dataset_name, describe, num_batches,
                                     padded_size, seeds)


def test_seeds_are_the_ones_the_pipelines_always_drew():
    """The seeds of a pipeline's `seed` are pinned: a change would reorder and remask the data
    of every run (and break a resume across the change). The k-th seed does not depend on how
    many are asked for: the translation pipeline's one shuffle seed is the image pipeline's."""
    assert seeds(0, 3) == (2968811710, 3677149159, 745650761)
    assert seeds(7, 2) == (2083679832, 3939563265)
    for seed in (0, 1, 12345):
        assert seeds(seed, 3)[:1] == seeds(seed, 1) and seeds(seed, 3)[:2] == seeds(seed, 2)
    assert len(set(seeds(0, 3))) == 3
    for bad in (-1, 1.5, "0", None):
        with pytest.raises(DataError, match="seed must be a non-negative integer"):
            seeds(bad, 1)


@pytest.mark.parametrize("process_count", [1, 2, 3])
@pytest.mark.parametrize("batch_size", [1, 4, 7])
def test_an_eval_pass_is_padded_to_whole_global_batches(batch_size, process_count):
    for n in range(0, 40):
        global_batch = batch_size * process_count
        assert num_batches(n, batch_size=batch_size,
                           process_count=process_count) == math.ceil(n / global_batch)
        padded = padded_size(n, batch_size=batch_size, process_count=process_count)
        assert padded % global_batch == 0 and n <= padded < n + global_batch


def test_check_sharding_names_the_bad_argument():
    check_sharding(1, 0, 1)
    check_sharding(8, 3, 4)
    for batch_size in (0, -2, 1.5):
        with pytest.raises(DataError, match=rf"batch_size must be a positive integer, got "
                                            rf"{batch_size}"):
            check_sharding(batch_size, 0, 1)
    for index, count in ((2, 2), (-1, 2)):
        with pytest.raises(DataError, match=rf"process_index {index} not in \[0, "
                                            rf"process_count={count}\)"):
            check_sharding(4, index, count)


def test_describe_names_a_tfds_source_and_any_other():
    tfds_like = types.SimpleNamespace(dataset_info=types.SimpleNamespace(name="bible_en_es_local"),
                                      split="train[:90%]")
    assert dataset_name(tfds_like) == "bible_en_es_local"
    assert describe(tfds_like) == "bible_en_es_local split train[:90%]"
    assert describe([{"x": 1}]) == "list split ?"

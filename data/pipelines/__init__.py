"""Grain input pipelines: a data source (or documents, or raw examples) -> this process's
batches of numpy arrays, sharded across processes, resumable (get_state / set_state).

    sharding.py               what every pipeline shares: process shards, eval padding and
                              num_batches, the seeds, check_sharding
    counts.py                 CountingIterator: the examples, truncated and dropped counts that
                              ride along in the batches, totalled
    images.py                 image classification: shuffled, augmented, normalised
    translation.py            translation: tokenize, truncate or drop, pack or pad
    masking.py                MLM masking with every rate from the config (BERT Table 8)
    pretraining_instances.py  which tokens form each pretraining example (pairs, packed sentences)
    pretraining.py            BERT / RoBERTa pretraining batches, masked
    finetune_datasets.py      the labelled datasets of fine-tuning, by name, as raw examples
    finetune.py               BERT fine-tuning batches for each task kind
    phases.py                 one pipeline for the first N batches, another after (128 -> 512)
    lm.py                     causal LM rows: whole documents end to end, cut with one token of
                              overlap, segment ids, restarting positions; eval at any length
"""

"""A DistilBERT student made from a teacher (models/bert_student.py): which layers it keeps, its
config, its parameters taken array by array from the teacher's (either layer layout, any head),
and the BERT options it needs: no segment embeddings, no pooler."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import linen as nn
from flax import traverse_util

from models.bert import BertConfig, BertModel, with_layer_layout
from models.bert_heads import BertForSequenceClassification
from models.bert_pretraining import BertForPreTraining
from models.bert_student import select_layers, student_config, student_params
from models.hf_bert import CheckpointError, config_to_hf
from tiny_bert import POSITIONS, inputs, tiny


def _params(model, seed=0, **kwargs):
    ids, types, mask = inputs()
    return jax.tree.map(np.asarray, nn.meta.unbox(
        model.init(jax.random.PRNGKey(seed), ids, types, mask, **kwargs)["params"]))


def _flat(tree):
    return traverse_util.flatten_dict(tree, sep="/")


def test_every_other_layer_ends_with_the_teachers_last():
    assert select_layers(6, "every_other") == (1, 3, 5)
    assert select_layers(12, "every_other") == (1, 3, 5, 7, 9, 11)
    assert select_layers(5, "every_other") == (0, 2, 4)
    assert select_layers(4, "every_other") == (1, 3)
    assert select_layers(1, "every_other") == (0,)
    assert select_layers(6, "0,2,4") == (0, 2, 4) == select_layers(6, [0, 2, 4])
    for spec, message in (("0,0", "strictly increasing"), ("3,1", "strictly increasing"),
                          ("0,6", r"layers are 0 \.\. 5"), ("", "empty"),
                          ("odd", "neither 'every_other'")):
        with pytest.raises(ValueError, match=message):
            select_layers(6, spec)


def test_student_config_halves_the_layers_and_drops_what_the_paper_drops():
    teacher = tiny(num_layers=4)
    cfg = student_config(teacher, (1, 3), segments=False, pooler=False)
    assert (cfg.num_layers, cfg.type_vocab_size, cfg.pooler, cfg.nsp) == (2, 0, False, False)
    assert (cfg.hidden_size, cfg.num_heads, cfg.mlp_dim, cfg.vocab_size) == (
        teacher.hidden_size, teacher.num_heads, teacher.mlp_dim, teacher.vocab_size)
    kept = student_config(teacher, (1, 3), segments=True, pooler=True)
    assert (kept.type_vocab_size, kept.pooler) == (teacher.type_vocab_size, True)
    with pytest.raises(ValueError, match="no pooler"):
        student_config(cfg, (0,), segments=False, pooler=True)
    with pytest.raises(CheckpointError, match="no HF BERT layout"):  # no HF BERT is like it
        config_to_hf(cfg)


@pytest.mark.parametrize("scan", [False, True])
def test_student_parameters_are_the_teachers_arrays(scan):
    """Embeddings, layer i = teacher layer layers[i], the MLM head: each the teacher's array;
    segment embeddings, pooler and NSP head gone; the student model takes the tree as it is."""
    teacher_cfg = tiny(num_layers=4, scan_layers=scan)
    teacher = _params(BertForPreTraining(teacher_cfg), masked_positions=POSITIONS)
    layers = (1, 3)
    student = student_params(teacher, layers, segments=False, pooler=False)
    assert set(student) == {"bert", "predictions"}
    assert set(student["bert"]) == {"embeddings", "encoder"}
    loop = with_layer_layout(teacher, scan=False)["bert"]
    for i, j in enumerate(layers):
        taught = _flat(loop["encoder"][f"layer_{j}"])
        got = _flat(student["bert"]["encoder"][f"layer_{i}"])
        assert got.keys() == taught.keys()
        for key, value in taught.items():
            np.testing.assert_array_equal(got[key], value, err_msg=f"layer_{i}/{key}")
    embeddings = _flat(loop["embeddings"])
    assert _flat(student["bert"]["embeddings"]).keys() == {
        k for k in embeddings if not k.startswith("token_type_embeddings")}
    for key, value in _flat(student["bert"]["embeddings"]).items():
        np.testing.assert_array_equal(value, embeddings[key])
    for key, value in _flat(student["predictions"]).items():
        np.testing.assert_array_equal(value, _flat(teacher["predictions"])[key])

    cfg = student_config(teacher_cfg, layers, segments=False, pooler=False)
    model = BertForPreTraining(cfg)
    fresh = _params(model, masked_positions=POSITIONS)
    fitted = with_layer_layout(student, scan=scan)
    assert jax.tree.structure(fitted) == jax.tree.structure(fresh)
    ids, types, mask = inputs()
    out = model.apply({"params": fitted}, ids, types, mask, masked_positions=POSITIONS)
    assert np.isfinite(np.asarray(out["mlm_logits"])).all()


def test_a_student_of_every_layer_computes_what_its_teacher_computes():
    """Keeping all layers, the segments and the pooler gives the teacher back, output for output:
    nothing is lost or misplaced in the copy (a fine-tuning head's classifier included)."""
    cfg = tiny(num_layers=3)
    teacher = BertForSequenceClassification(cfg, num_labels=3)
    params = _params(teacher)
    student_cfg = student_config(cfg, (0, 1, 2), segments=True, pooler=True)
    student = BertForSequenceClassification(student_cfg, num_labels=3)
    copied = student_params(params, (0, 1, 2), segments=True, pooler=True)
    ids, types, mask = inputs()
    np.testing.assert_array_equal(student.apply({"params": copied}, ids, types, mask),
                                  teacher.apply({"params": params}, ids, types, mask))


def test_without_segments_and_pooler_the_pooled_output_is_the_first_state():
    cfg = BertConfig(**{**tiny().__dict__, "type_vocab_size": 0, "pooler": False})
    model = BertModel(cfg)
    params = _params(model)
    assert "token_type_embeddings" not in params["embeddings"] and "pooler" not in params
    ids, types, mask = inputs()
    sequence, pooled = model.apply({"params": params}, ids, types, mask)
    np.testing.assert_array_equal(pooled, sequence[:, 0])
    other_types = model.apply({"params": params}, ids, 1 - types, mask)[0]
    np.testing.assert_array_equal(sequence, other_types)  # segment ids are not read
    with pytest.raises(ValueError, match="type_vocab_size=-1"):
        BertConfig(type_vocab_size=-1)

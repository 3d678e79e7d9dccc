"""Our BERT exported to Hugging Face format, loaded the way its users load it: `save_hf_checkpoint`
(models/hf_bert.py) writes a folder, transformers' own Flax BERT classes `from_pretrained` it
(they read the PyTorch-layout safetensors file through transformers' PyTorch -> Flax conversion;
no torch needed), and they compute what ours does: the hidden states and pooled output of
BertModel, the MLM and NSP logits of BertForPreTraining (BertForMaskedLM for a model without
NSP). test_hf_bert.py checks the layout against a NumPy BERT written from HF's names, which
shares this project's reading of them; this checks it against HF's code."""

from __future__ import annotations

import json
import os
import stat

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from hf_loading import load_pretrained as _load
from random_params import perturbed

from models.bert import BertModel
from models.bert_pretraining import BertForPreTraining
from models.hf_bert import save_hf_checkpoint

from tiny_bert import inputs, tiny


def _random_params(module, *args, **kwargs):
    """The module's parameters moved off their init (zero biases and unit scales would hide a
    swapped tensor)."""
    variables = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), nn.meta.unbox(variables)["params"])
    return perturbed(zeros, scale=0.2, seed=1)


def test_exported_bert_model_runs_in_transformers(tmp_path):
    cfg = tiny()
    ids, types, mask = inputs()                      # the second row ends in 3 padding tokens
    params = _random_params(BertModel(cfg), ids)
    folder = save_hf_checkpoint(tmp_path / "bert", cfg, params)
    hf = _load(transformers.FlaxBertModel, folder)(
        np.asarray(ids), attention_mask=np.asarray(mask), token_type_ids=np.asarray(types))
    sequence, pooled = BertModel(cfg).apply({"params": params}, ids, types, mask)
    np.testing.assert_allclose(hf.last_hidden_state, sequence, atol=1e-5, rtol=0)
    np.testing.assert_allclose(hf.pooler_output, pooled, atol=1e-5, rtol=0)


@pytest.mark.parametrize("nsp", [True, False])
def test_exported_bert_for_pretraining_runs_in_transformers(tmp_path, nsp):
    cfg = tiny(nsp=nsp)
    ids, types, mask = inputs()
    every_position = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
    model = BertForPreTraining(cfg)
    params = _random_params(model, ids, masked_positions=every_position)
    folder = save_hf_checkpoint(tmp_path / "bert", cfg, params)
    # The class transformers' Auto* classes build: no random NSP head for an MLM-only model.
    architecture = json.loads((folder / "config.json").read_text())["architectures"]
    assert architecture == ["BertForPreTraining" if nsp else "BertForMaskedLM"]
    if nsp:
        hf = _load(transformers.FlaxBertForPreTraining, folder)
    else:  # HF's masked LM has no pooler
        hf = _load(transformers.FlaxBertForMaskedLM, folder,
                   unused=("bert/pooler/dense/kernel", "bert/pooler/dense/bias"))
    hf = hf(np.asarray(ids), attention_mask=np.asarray(mask), token_type_ids=np.asarray(types))
    ours = model.apply({"params": params}, ids, types, mask, masked_positions=every_position)
    mlm = hf.prediction_logits if nsp else hf.logits
    np.testing.assert_allclose(mlm, ours["mlm_logits"], atol=1e-5, rtol=0)
    if nsp:
        np.testing.assert_allclose(hf.seq_relationship_logits, ours["nsp_logits"], atol=1e-5,
                                   rtol=0)
    else:
        assert "nsp_logits" not in ours


def test_an_exported_folder_is_readable_by_others_as_any_folder_under_the_umask(tmp_path):
    """model.safetensors is written through a private temporary file (mkstemp's 0600), then
    made 0644 as config.json is under the usual umask 022: an export is to be shared."""
    cfg = tiny()
    ids, _, _ = inputs()
    previous = os.umask(0o022)
    try:
        folder = save_hf_checkpoint(tmp_path / "bert", cfg, _random_params(BertModel(cfg), ids))
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755

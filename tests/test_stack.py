"""nn.scan over the layers (models/stack.py) in ViT, BERT and the Transformer: the same function
as the loop with the parameters stacked, remat inside the scan, logical axes and shardings of
the stacked parameters, layout conversion (HF checkpoints, fine-tuning, cached decoding), and
that the traced program no longer grows with depth."""

from __future__ import annotations

import dataclasses
import functools
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import decode as D
from models import hf_bert, safetensors_file
from models.bert import BertConfig, BertModel, with_layer_layout
from models.bert_pretraining import BertForPreTraining
from models.stack import LAYERS_AXIS, stack_layers, to_layout, unstack_layers
from models.transformer import Transformer, loop_layout, shift_right
from models.vit import ViT, ViTConfig
from train import partitioning
from train.finetune_init import replace_encoder

from dropout_sites import dropout_sites
from random_params import perturbed
from remat_checks import assert_same_loss_and_grads
from tiny_transformer import BOS, EOS, tiny, words

LAYERS = 2


def _perturbed(params):
    """Random offsets on every parameter (zero-initialised heads would hide the blocks)."""
    return perturbed(params, scale=0.1)


def _assert_same_tree_shapes(got, expected):
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    assert [np.shape(x) for x in jax.tree.leaves(got)] == [
        np.shape(x) for x in jax.tree.leaves(expected)]


# ---------------------------------------------------------------------------------- the models

def _vit(posemb="relative", **overrides):
    """posemb 'relative': each block's attention has its own relative keys."""
    cfg = ViTConfig(num_classes=10, image_size=(28, 28), patch_size=7, hidden_size=32,
                    num_layers=LAYERS, num_heads=2, mlp_dim=64, posemb=posemb, **overrides)
    images = jnp.asarray(np.random.default_rng(0).normal(size=(2, 28, 28, 1)), jnp.float32)
    labels = jnp.asarray([3, 7])

    def loss(params, train=False):
        logits = ViT(cfg).apply({"params": params}, images, train=train,
                                rngs={"dropout": jax.random.PRNGKey(1)})
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1).mean()

    return cfg, jax.jit(lambda: ViT(cfg).init(jax.random.PRNGKey(0), images)), loss


def _vit_stack(params):
    return stack_layers(params, LAYERS)


def _bert(**overrides):
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_layers=LAYERS, num_heads=2, mlp_dim=64,
                     max_position_embeddings=16, **overrides)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 50, (2, 9)), jnp.int32)
    mask = jnp.asarray([[1] * 9, [1] * 6 + [0] * 3], jnp.int32)
    positions = jnp.asarray([[1, 2, 3], [4, 5, 0]], jnp.int32)
    labels = jnp.take_along_axis(ids, positions, 1)

    def loss(params, train=False):
        out = BertForPreTraining(cfg).apply(
            {"params": params}, ids, None, mask, masked_positions=positions, train=train,
            rngs={"dropout": jax.random.PRNGKey(1)})
        mlm = -jnp.take_along_axis(jax.nn.log_softmax(out["mlm_logits"]), labels[..., None], -1)
        return mlm.mean() - jax.nn.log_softmax(out["nsp_logits"])[:, 0].mean()

    @jax.jit
    def init():
        return BertForPreTraining(cfg).init(jax.random.PRNGKey(0), ids, None, mask,
                                            masked_positions=positions)

    return cfg, init, loss


def _bert_stack(params):
    return with_layer_layout(params, scan=True)


def _transformer(**overrides):
    cfg = tiny(num_layers=LAYERS, posemb="t5", norm_position="pre", **overrides)
    rng = np.random.default_rng(8)
    inputs, labels = words(rng, 2, 7), words(rng, 2, 9)
    inputs[1, 5:] = 0
    targets = jnp.asarray(shift_right(labels, BOS))

    def loss(params, train=False):
        logits = Transformer(cfg).apply({"params": params}, inputs, targets, train=train,
                                        rngs={"dropout": jax.random.PRNGKey(1)})
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1).mean()

    return cfg, jax.jit(lambda: Transformer(cfg).init(jax.random.PRNGKey(0), inputs, targets)), loss


def _transformer_stack(params):
    return {**params, "encoder": stack_layers(params["encoder"], LAYERS),
            "decoder": stack_layers(params["decoder"], LAYERS)}


MODELS = {"vit": (_vit, _vit_stack), "bert": (_bert, _bert_stack),
          "transformer": (_transformer, _transformer_stack),
          # ViT Table 8's "Every Layer" column: each block learns a position table of its own.
          "vit_every_layer": (functools.partial(_vit, posemb="learned_2d", pool="cls",
                                                posemb_mode="every_layer"), _vit_stack)}


@pytest.mark.parametrize("name", MODELS)
def test_scan_is_the_loop_with_stacked_parameters(name):
    make, stack = MODELS[name]
    _, init_loop, loss_loop = make()
    _, init_scan, _ = make(scan_layers=True)
    params = _perturbed(nn.meta.unbox(init_loop())["params"])
    stacked = stack(params)
    # The scanned model's own parameters have exactly the stacked shapes.
    _assert_same_tree_shapes(nn.meta.unbox(init_scan())["params"], stacked)

    expected = jax.jit(jax.value_and_grad(loss_loop))(params)
    # remat inside the scan too (once: the remat tests of each model cover the policies)
    for remat in ("none", "full") if name.startswith("vit") else ("none",):
        _, _, loss_scan = make(scan_layers=True, remat=remat)
        loss, grads = jax.jit(jax.value_and_grad(loss_scan))(stacked)
        assert_same_loss_and_grads((loss, grads), (expected[0], stack(expected[1])), tol=2e-6)


@pytest.mark.parametrize("name", MODELS)
def test_scanned_parameters_carry_a_replicated_layers_axis(name):
    make, _ = MODELS[name]
    _, init_scan, _ = make(scan_layers=True)
    boxed = jax.eval_shape(init_scan)["params"]
    scanned = {"vit": lambda p: p["blocks"], "transformer": lambda p: p["encoder"]["blocks"],
               "bert": lambda p: p["bert"]["encoder"]["layers"]}[name.partition("_")[0]](boxed)
    is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    boxes = jax.tree.leaves(scanned, is_leaf=is_box)
    assert boxes and all(is_box(b) and b.names[0] == LAYERS_AXIS and b.value.shape[0] == LAYERS
                         for b in boxes)
    mesh = partitioning.make_mesh({"data": -1, "fsdp": 1, "tensor": 1})
    for sharding in jax.tree.leaves(partitioning.logical_shardings(scanned, mesh)):
        assert sharding.spec[0] is None  # every device holds every layer of its shard


@pytest.mark.parametrize("name", ["bert", "transformer"])
def test_dropout_acts_under_scan(name):
    """The scanned layers drop at the same sites and rates as the loop's (each site once for
    all layers), and the drops change the loss."""
    make, _ = MODELS[name]
    _, init_loop, loss_loop = make(dropout_rate=0.3)
    _, init_scan, loss_scan = make(scan_layers=True, dropout_rate=0.3)

    def sites(init, loss):
        params = nn.meta.unbox(jax.eval_shape(init))["params"]
        return dropout_sites(lambda: jax.eval_shape(lambda p: loss(p, train=True), params))

    def as_scanned(path):  # layer_0 / block_1 -> the scanned module's name
        return re.sub(r"\b(layer|block)_\d+\b", lambda m: m.group(1) + "s", path)

    loop = sites(init_loop, loss_loop)
    assert any(re.search(r"(layer|block)_1/", path) for path, _ in loop)
    assert sites(init_scan, loss_scan) == {(as_scanned(path), rate) for path, rate in loop}
    params = _perturbed(nn.meta.unbox(init_scan())["params"])
    evaluated, trained = jax.jit(lambda p: (loss_scan(p), loss_scan(p, train=True)))(params)
    assert np.isfinite(trained) and float(trained) != pytest.approx(float(evaluated), abs=1e-6)


def test_traced_program_does_not_grow_with_depth():
    def num_equations(layers, scan):
        cfg = ViTConfig(num_classes=10, image_size=(28, 28), patch_size=7, hidden_size=32,
                        num_layers=layers, num_heads=2, mlp_dim=64, scan_layers=scan)
        images = jnp.zeros((1, 28, 28, 1))
        params = jax.eval_shape(lambda: ViT(cfg).init(jax.random.PRNGKey(0), images))
        jaxpr = jax.make_jaxpr(lambda p: ViT(cfg).apply(p, images))(params)
        return len(jaxpr.jaxpr.eqns)

    assert num_equations(2, scan=True) == num_equations(6, scan=True)
    assert num_equations(6, scan=False) > num_equations(2, scan=False)


# ------------------------------------------------------------------------ layout conversions

def test_stack_and_unstack_are_inverse_and_check_their_input():
    rng = np.random.default_rng(0)
    loop = {f"block_{i}": {"w": rng.normal(size=(2, 3)), "b": rng.normal(size=(3,))}
            for i in range(3)}
    loop["norm"] = {"scale": np.ones(3)}
    stacked = stack_layers(loop, 3)
    assert set(stacked) == {"blocks", "norm"} and stacked["blocks"]["w"].shape == (3, 2, 3)
    assert isinstance(stacked["blocks"]["w"], np.ndarray)          # NumPy stays NumPy
    np.testing.assert_array_equal(stacked["blocks"]["b"][1], loop["block_1"]["b"])
    back = unstack_layers(stacked)
    assert set(back) == set(loop)
    for name in loop:
        for key in loop[name]:
            np.testing.assert_array_equal(back[name][key], loop[name][key])
    with pytest.raises(ValueError, match="block_0..block_3 of a 4-layer loop layout"):
        stack_layers(loop, 4)
    with pytest.raises(ValueError, match="block_0..block_1 of a 2-layer"):
        stack_layers(loop, 2)   # block_2 would be left behind
    with pytest.raises(ValueError, match="expected a scanned stack 'blocks'"):
        unstack_layers(loop)


def test_to_layout_converts_only_what_is_in_the_other_layout():
    rng = np.random.default_rng(1)
    loop = {f"layer_{i}": {"w": rng.normal(size=(2,))} for i in range(4)}
    loop["norm"] = {"scale": np.ones(2)}
    stacked = to_layout(loop, scan=True, prefix="layer_", scan_name="layers")
    assert set(stacked) == {"layers", "norm"} and stacked["layers"]["w"].shape == (4, 2)
    again = to_layout(stacked, scan=True, prefix="layer_", scan_name="layers")
    assert again == stacked and again is not stacked               # a copy, not converted twice
    back = to_layout(stacked, scan=False, prefix="layer_", scan_name="layers")
    assert set(back) == set(loop)
    np.testing.assert_array_equal(back["layer_3"]["w"], loop["layer_3"]["w"])
    assert to_layout(loop, scan=False, prefix="layer_", scan_name="layers") == loop
    assert to_layout({"norm": {}}, scan=True) == {"norm": {}}      # no blocks: as it is


def test_bert_hidden_states_and_hf_checkpoints_under_scan(tmp_path):
    cfg, init, _ = _bert()
    scan_cfg = dataclasses.replace(cfg, scan_layers=True)
    params = _perturbed(nn.meta.unbox(init())["params"])
    stacked = with_layer_layout(params, scan=True)
    assert set(stacked["bert"]["encoder"]) == {"layers"}
    ids = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 7)), jnp.int32)
    loop_out = BertModel(cfg).apply({"params": params["bert"]}, ids, output_hidden_states=True)
    scan_out = BertModel(scan_cfg).apply({"params": stacked["bert"]}, ids,
                                         output_hidden_states=True)
    assert len(scan_out[2]) == LAYERS + 1
    for got, want in zip(jax.tree.leaves(scan_out), jax.tree.leaves(loop_out)):
        np.testing.assert_allclose(got, want, atol=2e-6)

    # Export of a scanned model writes HF's per-layer names; import into either layout.
    hf_bert.save_hf_checkpoint(tmp_path / "hf", scan_cfg, stacked)
    tensors = safetensors_file.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert f"bert.encoder.layer.{LAYERS - 1}.output.dense.weight" in tensors
    assert tensors.keys() == hf_bert.params_to_hf(params, cfg).keys()
    for scan, expected in ((True, stacked), (False, params)):
        _, loaded = hf_bert.load_hf_checkpoint(tmp_path / "hf", scan_layers=scan)
        _assert_same_tree_shapes(loaded, expected)
        for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(expected)):
            np.testing.assert_array_equal(got, np.asarray(want))


def test_fine_tuning_converts_a_loop_encoder_into_a_scanned_model():
    cfg, init, _ = _bert()
    encoder = _perturbed(nn.meta.unbox(init())["params"])["bert"]   # a loop-layout checkpoint
    _, init_scan, _ = _bert(scan_layers=True)
    variables = replace_encoder(init_scan(), encoder)
    layers = nn.meta.unbox(variables)["params"]["bert"]["encoder"]["layers"]
    np.testing.assert_array_equal(layers["mlp"]["wi"]["kernel"][LAYERS - 1],
                                  encoder["encoder"][f"layer_{LAYERS - 1}"]["mlp"]["wi"]["kernel"])
    assert isinstance(variables["params"]["bert"]["encoder"]["layers"]["mlp"]["wi"]["kernel"],
                      nn.LogicallyPartitioned)   # the model's boxes are kept


def test_cached_decoding_of_a_scanned_transformer_uses_the_loop_layout():
    cfg, init, _ = _transformer()
    params = _perturbed(nn.meta.unbox(init())["params"])
    scan_model = Transformer(dataclasses.replace(cfg, scan_layers=True))
    stacked = _transformer_stack(params)
    inputs = words(np.random.default_rng(3), 3, 6)

    def translate(model, p):
        return jax.jit(lambda p: D.predict(model, p, inputs, beam_size=2, max_decode_len=5,
                                           eos_id=EOS, bos_id=BOS))(p)

    for got, want in zip(translate(scan_model, stacked), translate(Transformer(cfg), params)):
        np.testing.assert_allclose(got, want, atol=1e-5)
    model, unstacked = loop_layout(scan_model, stacked)
    assert not model.config.scan_layers and f"block_{LAYERS - 1}" in unstacked["decoder"]
    encoded = scan_model.apply({"params": stacked}, inputs, method=Transformer.encode)
    with pytest.raises(ValueError, match="cached decoding runs the loop layout"):
        scan_model.apply({"params": stacked}, encoded, inputs, inputs[:, :1], decode=True,
                         method=Transformer.decode, mutable=["cache"])

"""Masked-autoencoder pretraining (train/tasks/mae_pretrain.py) and what starts from it: the loss
on the masked patches only, fine-tuning that loads the encoder exactly (train/vit_init.py), a
linear probe that trains only its head (train/tasks/classify.py, train/optimizers.py `freeze`),
and its feature statistics, on the Fashion-MNIST fixture."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import traverse_util
from flax import linen as nn
from random_params import perturbed

from models import mae
from models.vit import ViT, patchify, pool_tokens
from train.config import apply_override, load_config_file


def _config(spec: str, **overrides):
    config = load_config_file(spec)
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


@pytest.fixture(scope="module")
def pretrained(fixture_data_root, tmp_path_factory):
    """The workdir of a finished smoke MAE pretraining run (Table 1c's variant too: its
    encoder has a mask token the fine-tuning leaves out)."""
    from train.trainer import Trainer

    workdir = tmp_path_factory.mktemp("mae") / "pretrain"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAPERS_JAX_DATA", str(fixture_data_root))
        config = _config("configs/vit/mae.py:smoke,mask_token_in_encoder", **{
            "train.num_steps": 4, "train.eval_every": 0, "train.checkpoint_every": 4})
        Trainer(config, workdir).run()
    return workdir


def _flat(tree) -> dict:
    return traverse_util.flatten_dict(jax.tree.map(np.asarray, nn.meta.unbox(tree)))


def test_the_loss_is_on_the_masked_patches_of_the_real_images_only(fashion_mnist_env):
    """Against NumPy on the model's own predictions: the mean over the masked patches of the
    real images of each patch's mean squared error, on normalised targets; pixel_mse on the
    predictions taken back to pixels; the normalizer counts the masked patches."""
    from train.tasks.mae_pretrain import MAEPretrainingTask

    task = MAEPretrainingTask(_config("configs/vit/mae.py:smoke"))
    cfg = task.model_config
    params = perturbed(jax.device_get(nn.meta.unbox(task.init_variables(
        jax.random.PRNGKey(0), task.dummy_inputs(1))["params"])), scale=0.1)
    batch = next(task.train_iterator(batch_size=8, seed=0, process_index=0, process_count=1))
    batch = {k: np.asarray(v) for k, v in batch.items()}
    batch["mask"][[1, 6]] = 0.0
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(1))
    normalizer = task.loss_normalizers(batch)["mse"]
    assert float(normalizer) == 6 * cfg.num_masked

    out = task.model.apply({"params": params}, batch["image"], batch["patch_order"])
    predictions, masked = np.asarray(out["predictions"], np.float64), np.asarray(out["masked"])
    np.testing.assert_array_equal(masked.sum(1), cfg.num_masked)
    patches = np.asarray(patchify(batch["image"], cfg.encoder.patch_size), np.float64)
    # the unbiased variance over each patch's pixels, as MAE's released norm_pix_loss
    mean, var = patches.mean(-1, keepdims=True), patches.var(-1, keepdims=True, ddof=1)
    targets = (patches - mean) / np.sqrt(var + 1e-6)
    weights = masked * batch["mask"][:, None]
    errors = ((predictions - targets) ** 2).mean(-1)
    np.testing.assert_allclose(float(terms["mse"]) / float(normalizer),
                               (errors * weights).sum() / weights.sum(), rtol=1e-5)
    pixels = predictions * np.sqrt(var + 1e-6) + mean
    pixel_sum, count = metrics["pixel_mse"]
    assert float(count) == weights.sum()
    np.testing.assert_allclose(float(pixel_sum), (((pixels - patches) ** 2).mean(-1)
                                                  * weights).sum(), rtol=1e-5)
    # The visible patches' predictions do not enter: the gradient of the loss with respect to
    # the predictions is zero there and at padding rows.
    grad = jax.grad(lambda p: (mae.patch_errors(p, jnp.asarray(targets)) * weights).sum())(
        jnp.asarray(predictions))
    assert np.all(np.asarray(grad)[weights == 0] == 0) and np.any(np.asarray(grad) != 0)


def test_fine_tuning_from_an_mae_workdir_loads_the_encoder_exactly(pretrained, fashion_mnist_env):
    """configs/vit/fashion_mnist.py:init=<MAE workdir>: the run's ViT is the encoder's
    architecture, every encoder array is the checkpoint's as saved, the encoder's Table 1c mask
    token and the decoder are left out, the classifier is new (zeros); --print_config's plan
    gives the same model."""
    from train.checkpointing import load_params
    from train.tasks.classify import ClassificationTask

    config = _config(f"configs/vit/fashion_mnist.py:smoke,init={pretrained}")
    task = ClassificationTask(config)
    saved = json.loads((pretrained / "config.json").read_text())["model"]["encoder"]
    cfg = task.model_config
    for key in ("patch_size", "hidden_size", "num_layers", "posemb", "pool", "stem_channels"):
        assert getattr(cfg, key) == saved[key], key
    assert (cfg.num_classes, cfg.stem_channels, cfg.pool) == (10, 0, "cls")
    assert ClassificationTask.plan(config).model_config == cfg
    assert any("decoder left out" in note for note in task.resolution().notes)

    encoder = _flat(load_params(pretrained)["encoder"])
    assert ("mask_token",) in encoder  # Table 1c's encoder has one; a ViT does not
    params = _flat(task.init_variables(jax.random.PRNGKey(5), task.dummy_inputs(1))["params"])
    assert set(params) == {k for k in encoder if k != ("mask_token",)} | {
        ("head", "kernel"), ("head", "bias")}
    for key, value in params.items():
        if key[0] == "head":
            assert not value.any(), key
        else:
            np.testing.assert_array_equal(value, encoder[key], err_msg=str(key))


def test_the_probe_trains_only_the_head(pretrained, fashion_mnist_env, tmp_path):
    """A linear probe (`:probe`, here with weight decay on, which would shrink any matrix the
    optimizer touched): no gradient reaches the encoder (stop_gradient), and after training
    every parameter but the classifier is bit for bit what was loaded (optax.set_to_zero);
    config.json says what trained."""
    from train.trainer import Trainer

    config = _config(f"configs/vit/fashion_mnist.py:smoke,probe,init={pretrained}", **{
        "optimizer.weight_decay": 0.05, "train.num_steps": 6, "train.eval_every": 0,
        "train.checkpoint_every": 6})
    trainer = Trainer(config, tmp_path / "probe")
    task = trainer.task
    start = jax.device_get(trainer.init_state().params)
    batch = next(task.train_iterator(batch_size=8, seed=0, process_index=0, process_count=1))
    batch = {k: v for k, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}
    # (At a non-zero head: the zero-initialised one passes no gradient back to any encoder.)
    head = {**start, "head": perturbed(start["head"], scale=0.1)}
    grads = _flat(jax.grad(lambda p: task.loss_fn(p, batch, jax.random.PRNGKey(0))[0][
        "cross_entropy"])(head))
    assert all(not value.any() for key, value in grads.items() if key[0] != "head")
    assert grads[("head", "kernel")].any()

    trainer.run()
    before, after = _flat(start), _flat(jax.device_get(trainer.final_state.params))
    for key, value in before.items():
        if key[0] == "head":
            assert not np.array_equal(after[key], value), key
        else:
            np.testing.assert_array_equal(after[key], value, err_msg=str(key))
    saved = json.loads((tmp_path / "probe" / "config.json").read_text())
    assert saved["task"]["trained_parameters"] == ["head"] and saved["task"]["probe"]
    assert saved["model"]["probe_norm"] is True
    # Neither export format has the standardisation before the head: refused, not dropped.
    from train.config import ConfigError
    from train.export import export
    with pytest.raises(ConfigError, match="linear probe with probe_norm=True"):
        export(str(tmp_path / "probe"), str(tmp_path / "probe.npz"))
    assert not (tmp_path / "probe.npz").exists()


def test_the_probe_standardises_the_features_with_their_training_statistics(pretrained,
                                                                          fashion_mnist_env):
    """ProbeNorm's statistics are the mean and variance of the frozen encoder's class-token
    features over the first task.probe_norm_examples training images (NumPy over the encoder
    run here), and the model standardises the pooled features with them before the head."""
    from train.tasks.classify import ClassificationTask

    config = _config(f"configs/vit/fashion_mnist.py:smoke,probe,init={pretrained}",
                     **{"task.probe_norm_examples": 450, "data.eval_batch_size": 200})
    task = ClassificationTask(config)
    cfg = task.model_config
    encoder = {k: v for k, v in task.init.params.items() if k not in ("head", "probe_norm")}
    source = task.train_source()
    images = np.stack([np.asarray(source[i]["image"]) for i in range(450)])
    images = (images.astype(np.float32) / 255 - 0.2860) / 0.3530
    encoder_cfg = dataclasses.replace(cfg, num_classes=0, probe_norm=False)
    features = np.asarray(pool_tokens(ViT(encoder_cfg).apply({"params": encoder}, images),
                                      cfg.pool), np.float64)
    stats = task.probe_statistics
    np.testing.assert_allclose(stats["mean"], features.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats["var"], features.var(0), rtol=1e-3, atol=1e-5)

    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    params = jax.device_get(nn.meta.unbox(params))
    np.testing.assert_array_equal(params["probe_norm"]["mean"], stats["mean"])
    _, captured = task.model.apply({"params": params}, images[:4], capture_intermediates=True,
                                   mutable=["intermediates"])
    standardised = np.asarray(captured["intermediates"]["probe_norm"]["__call__"][0])
    np.testing.assert_allclose(standardised, (features[:4] - stats["mean"])
                               / np.sqrt(stats["var"] + 1e-6), rtol=1e-4, atol=1e-4)


def test_a_probe_that_cannot_be_linear_or_has_no_encoder_is_refused(fashion_mnist_env):
    from train.config import ConfigError
    from train.tasks.classify import ClassificationTask

    with pytest.raises(ConfigError, match="computes the features' statistics through a "
                                          "pretrained encoder, but config.init='scratch'"):
        ClassificationTask(_config("configs/vit/fashion_mnist.py:smoke,probe"))
    with pytest.raises(ConfigError, match=r"pre-logits layer \(head_hidden_size=8\)"):
        ClassificationTask(_config("configs/vit/fashion_mnist.py:smoke,probe",
                                   **{"model.head_hidden_size": 8, "model.probe_norm": False}))
    with pytest.raises(ConfigError, match="it needs config.task.probe=True"):
        ClassificationTask(_config("configs/vit/fashion_mnist.py:smoke",
                                   **{"model.probe_norm": True}))


def test_a_fraction_of_the_labels_is_as_many_of_every_class(fashion_mnist_env):
    """`:labels=0.05` (data.train_fraction, balanced): 100 of the fixture's 2,000 training
    images, 10 of every class, the same for a seed, another for another seed."""
    from train.tasks.classify import ClassificationTask

    def chosen(seed):
        task = ClassificationTask(_config("configs/vit/fashion_mnist.py:smoke,labels=0.05",
                                          seed=seed))
        source = task.train_source()
        return source.indices, np.array([source[i]["label"] for i in range(len(source))])

    indices, labels = chosen(0)
    assert len(indices) == 100 and (np.bincount(labels, minlength=10) == 10).all()
    np.testing.assert_array_equal(chosen(0)[0], indices)
    assert not np.array_equal(chosen(1)[0], indices)


@pytest.mark.parametrize("spec", ["configs/vit/mae.py:smoke",
                                  "configs/vit/fashion_mnist.py:smoke,labels=0.05"],
                         ids=["mae", "classify"])
def test_a_random_fraction_is_the_seeded_draw_without_replacement(fashion_mnist_env, spec):
    """data.train_subset='random' (the MAE config's default) through the task: round(f N) =
    100 of the 2,000 training images, the seed's uniform draw without replacement
    (data/pipelines/subsets.py: NumPy's default_rng(config.seed), sorted), in whatever class
    proportions it gives; another seed draws others."""
    from train.tasks.classify import ClassificationTask
    from train.tasks.mae_pretrain import MAEPretrainingTask

    task_class = MAEPretrainingTask if "mae.py" in spec else ClassificationTask

    def chosen(seed):
        config = _config(spec, seed=seed, **{"data.train_fraction": 0.05,
                                             "data.train_subset": "random"})
        source = task_class(config).train_source()
        return np.asarray(source.indices), source

    if task_class is MAEPretrainingTask:
        assert load_config_file(spec).data.train_subset == "random"  # the default there
    indices, source = chosen(0)
    total = len(source.source)
    assert total == 2000
    expected = np.sort(np.random.default_rng(0).choice(total, size=100, replace=False))
    np.testing.assert_array_equal(indices, expected)
    labels = np.array([source[i]["label"] for i in range(len(source))])
    np.testing.assert_array_equal(labels, [source.source[int(i)]["label"] for i in expected])
    assert not (np.bincount(labels, minlength=10) == 10).all()  # not the balanced draw
    other, _ = chosen(3)
    np.testing.assert_array_equal(
        other, np.sort(np.random.default_rng(3).choice(total, size=100, replace=False)))
    assert not np.array_equal(other, indices)


def test_norm_pix_loss_on_one_value_patches_is_refused(fashion_mnist_env):
    """One-pixel patches of a grey image have no variance: every norm_pix target would be NaN
    (unbiased variance 0/0); without norm_pix_loss they train."""
    from train.config import ConfigError
    from train.tasks.mae_pretrain import MAEPretrainingTask

    one_pixel = {"model.encoder.patch_size": 1}  # Fashion-MNIST's 28 x 28 x 1
    with pytest.raises(ConfigError, match=r"norm_pix_loss=True normalises each patch's 1 value"):
        MAEPretrainingTask(_config("configs/vit/mae.py:smoke", **one_pixel,
                                   **{"model.norm_pix_loss": True}))
    MAEPretrainingTask(_config("configs/vit/mae.py:smoke", **one_pixel,
                               **{"model.norm_pix_loss": False}))


def test_a_model_key_the_task_does_not_read_is_refused():
    """A typo in a config file's model section, or a flag that is not a bool, is an error that
    names the key, not a setting silently left at its default."""
    from train.config import ConfigError
    from train.tasks.mae_pretrain import model_config

    config = load_config_file("configs/vit/mae.py:smoke")
    model_config(config)
    config.model.mask_raito = 0.5
    with pytest.raises(ConfigError, match='config.model.mask_raito.*Did you mean "mask_ratio"'):
        model_config(config)
    config = load_config_file("configs/vit/mae.py:smoke")  # a file writing 1 where True goes
    config.model = ml_collections.ConfigDict({**config.model.to_dict(), "norm_pix_loss": 1})
    with pytest.raises(ConfigError, match="norm_pix_loss=1 must be True or False"):
        model_config(config)

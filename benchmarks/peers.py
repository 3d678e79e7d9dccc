"""The peer of the benchmark: Hugging Face transformers' Flax BERT and ViT (transformers 4.57.6,
the last release with Flax models), built from our model configs and driven by our tasks.

Each peer model is wrapped so that it answers the one call our task's loss makes,
``model.apply({'params': params}, ...)``; the task's loss, metrics and the trainer's step are
then the same code for both libraries, and only the model differs:

  ``HfBertForPreTraining``  ``FlaxBertForPreTraining.__call__`` (what HF's Flax MLM example
      trains with): the MLM head computes logits at every position; the task's loss reads them at
      ``masked_positions`` (a gather of the [b, l, V] logits, whose gradient is dense again).
  ``HfViT``                 ``FlaxViTForImageClassification.__call__`` (NCHW pixels, as it
      takes them; our NHWC batch is transposed, and HF transposes back: XLA folds the pair).

transformers comes with the ``test`` extra (what ``make`` installs) or alone with the ``bench``
extra (``pip install -c constraints.txt -e '.[bench]'``); nothing outside benchmarks/ imports it.
Under jax 0.10.2 / flax 0.12.8 its Flax BERT and ViT import and run unchanged (no shim needed).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax.core import unfreeze

from models.bert import BertConfig
from models.bert_pretraining import gather_positions
from models.vit import ViTConfig

TRANSFORMERS_VERSION = "4.57.6"


def import_transformers():
    """The transformers module, or an ImportError that says how to install it."""
    try:
        import transformers
    except ImportError as error:
        raise ImportError(
            "the benchmark's peer needs Hugging Face transformers with its Flax models: "
            "run `make install`, or `.venv/bin/pip install -c constraints.txt -e '.[bench]'` "
            f"(transformers=={TRANSFORMERS_VERSION})") from error
    if transformers.__version__ != TRANSFORMERS_VERSION:
        raise ImportError(f"transformers {transformers.__version__} is installed; the benchmark "
                          f"is pinned to {TRANSFORMERS_VERSION} (the last release with Flax "
                          "models): `pip install -c constraints.txt -e '.[bench]'`")
    return transformers


def hf_bert_config(cfg: BertConfig):
    """The transformers.BertConfig of the same architecture as our ``cfg`` (post-LN, exact GELU,
    learned positions, tied MLM output weights)."""
    if cfg.posemb != "learned":
        raise ValueError(f"HF BERT has learned positions only; our config has posemb="
                         f"{cfg.posemb!r}: benchmark with posemb='learned'")
    transformers = import_transformers()
    return transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim, hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout_rate,
        attention_probs_dropout_prob=cfg.attention_dropout_rate,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size, initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps, tie_word_embeddings=True)


def hf_vit_config(cfg: ViTConfig, channels: int):
    """The transformers.ViTConfig of the same architecture as our ``cfg``: pre-LN blocks, class
    token, learned 1-D positions, final LayerNorm, linear head on the class token."""
    height, width = cfg.image_size
    unsupported = {"posemb": (cfg.posemb, "learned_1d"), "posemb_mode": (cfg.posemb_mode, "stem"),
                   "pool": (cfg.pool, "cls"),
                   "norm": (cfg.norm, "layernorm"), "norm_position": (cfg.norm_position, "pre"),
                   "activation": (cfg.activation, "gelu"), "head_hidden_size": (cfg.head_hidden_size, 0),
                   "stem_channels": (cfg.stem_channels, 0)}
    for field, (value, needed) in unsupported.items():
        if value != needed:
            raise ValueError(f"HF ViT has no {field}={value!r}; benchmark with {field}={needed!r}")
    if height != width:
        raise ValueError(f"HF ViT takes square images only; got image_size={cfg.image_size}")
    transformers = import_transformers()
    return transformers.ViTConfig(
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.mlp_dim, hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout_rate,
        attention_probs_dropout_prob=cfg.attention_dropout_rate,
        layer_norm_eps=1e-6,  # our make_norm's epsilon (HF's default is 1e-12)
        image_size=height, patch_size=cfg.patch_size, num_channels=channels, qkv_bias=True,
        num_labels=cfg.num_classes)


def _dtype(name: str):
    return jnp.dtype(name)


class _Peer:
    """An HF Flax model seen through ``apply({'params': p}, ...)`` and ``init_params(rng)``
    (traceable: the benchmark jits it into the initial train state)."""

    def __init__(self, hf_model, input_shape):
        self.hf_model = hf_model
        self._input_shape = input_shape

    def init_params(self, rng):
        """Freshly initialised HF parameters (HF's own initialisers), as a plain dict."""
        return unfreeze(self.hf_model.init_weights(rng, self._input_shape))


class HfBertForPreTraining(_Peer):
    """``FlaxBertForPreTraining`` answering the call of
    ``models.bert_pretraining.BertForPreTraining.apply``:
    ``{'mlm_logits': [b, P, V] at masked_positions, 'nsp_logits': [b, 2]}`` (float32)."""

    def __init__(self, cfg: BertConfig, seq_length: int):
        transformers = import_transformers()
        model = transformers.FlaxBertForPreTraining(
            hf_bert_config(cfg), input_shape=(1, seq_length), dtype=_dtype(cfg.dtype),
            _do_init=False)
        super().__init__(model, (1, seq_length))

    def apply(self, variables, input_ids, token_type_ids=None, attention_mask=None, *,
              masked_positions, train: bool = False, rngs=None):
        out = self.hf_model(input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids, params=variables["params"],
                            dropout_rng=None if rngs is None else rngs["dropout"], train=train)
        mlm = gather_positions(out.prediction_logits, masked_positions)
        return {"mlm_logits": mlm.astype(jnp.float32),
                "nsp_logits": out.seq_relationship_logits.astype(jnp.float32)}


class HfViT(_Peer):
    """``FlaxViTForImageClassification`` answering ``models.vit.ViT.apply``'s call:
    ``images [b, H, W, C] -> float32 logits [b, classes]``."""

    def __init__(self, cfg: ViTConfig, channels: int):
        transformers = import_transformers()
        height, width = cfg.image_size
        model = transformers.FlaxViTForImageClassification(
            hf_vit_config(cfg, channels), input_shape=(1, height, width, channels),
            dtype=_dtype(cfg.dtype), _do_init=False)
        super().__init__(model, (1, height, width, channels))

    def apply(self, variables, images, *, train: bool = False, rngs=None):
        out = self.hf_model(jnp.transpose(images, (0, 3, 1, 2)), params=variables["params"],
                            dropout_rng=None if rngs is None else rngs["dropout"], train=train)
        return out.logits.astype(jnp.float32)

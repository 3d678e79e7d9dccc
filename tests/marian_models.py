"""Small Hugging Face Marian models with random weights (nothing downloaded), their tensors in
PyTorch's names, and sentences in Marian's ids: the fixtures of the Marian converter and beam
search tests."""

from __future__ import annotations

import numpy as np
import transformers
from flax.traverse_util import flatten_dict
from random_params import perturbed

from models.hf_folder import write_folder

# OPUS-MT's choices at a small size: swish, scaled embeddings, tied, padding last, decoding
# starts from padding.
HF_CONFIG = dict(vocab_size=40, d_model=32, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                 decoder_ffn_dim=64, max_position_embeddings=64, activation_function="swish",
                 scale_embedding=True, pad_token_id=39, eos_token_id=0,
                 decoder_start_token_id=39, forced_eos_token_id=0)


def hf_config(**changes) -> transformers.MarianConfig:
    return transformers.MarianConfig(**{**HF_CONFIG, **changes})


def hf_model(seed: int = 0, scale: float = 0.1, **changes):
    """FlaxMarianMTModel with random weights, every parameter moved off its init (zero biases,
    unit norm scales and a zero final_logits_bias would hide a swapped tensor)."""
    model = transformers.FlaxMarianMTModel(hf_config(**changes), seed=seed)
    model.params = perturbed(model.params, scale=scale, seed=seed + 1)
    return model


def pytorch_name(flax_path) -> tuple[str, bool]:
    """(HF's PyTorch name, whether the tensor is transposed) of a Flax Marian parameter path:
    transformers' own PyTorch -> Flax renaming read backwards (a 'kernel' is a weight
    transposed; a LayerNorm 'scale' and an 'embedding' are weights), the path joined with dots.
    Independent of models/hf_marian.py's table."""
    *module, leaf = flax_path
    if leaf == "bias" or flax_path == ("final_logits_bias",):
        return ".".join(flax_path), False
    return ".".join((*module, "weight")), leaf == "kernel"


def pytorch_tensors(flax_params) -> dict[str, np.ndarray]:
    """A Flax Marian's params in HF's PyTorch names and layout (``pytorch_name``)."""
    out = {}
    for path, value in flatten_dict(flax_params).items():
        name, transposed = pytorch_name(path)
        out[name] = np.asarray(value).T if transposed else np.asarray(value)
    return out


def write_hf_folder(folder, model, tensors=None):
    """The folder HF's save_pretrained would write (config.json + model.safetensors)."""
    tensors = pytorch_tensors(model.params) if tensors is None else tensors
    return write_folder(folder, model.config.to_dict(), tensors)


def sentences(config, rows: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) in Marian's ids: random tokens that are neither padding nor
    EOS, each row ending with EOS, rows after the first shorter (padded at the end)."""
    rng = np.random.default_rng(seed)
    special = {config.pad_token_id, config.eos_token_id}
    words = np.array([i for i in range(config.vocab_size) if i not in special])
    ids = np.full((rows, length), config.pad_token_id, np.int32)
    for r in range(rows):
        n = length - (r * 3) % max(length - 2, 1)
        ids[r, :n - 1] = rng.choice(words, n - 1)
        ids[r, n - 1] = config.eos_token_id
    return ids, (ids != config.pad_token_id).astype(np.int32)

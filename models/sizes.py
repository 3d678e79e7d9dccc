"""Model size tables from the papers, as plain data (no jax import, so configs may read them)."""

from __future__ import annotations

# ViT sizes: num_layers, hidden_size, mlp_dim, num_heads.
# B, L, H: Dosovitskiy et al. 2021, Table 1. Ti and S: Touvron et al. 2021 (DeiT), the usual
# smaller companions (head dimension 64 throughout).
VIT_SIZES: dict[str, dict[str, int]] = {
    "Ti": dict(num_layers=12, hidden_size=192, mlp_dim=768, num_heads=3),
    "S": dict(num_layers=12, hidden_size=384, mlp_dim=1536, num_heads=6),
    "B": dict(num_layers=12, hidden_size=768, mlp_dim=3072, num_heads=12),
    "L": dict(num_layers=24, hidden_size=1024, mlp_dim=4096, num_heads=16),
    "H": dict(num_layers=32, hidden_size=1280, mlp_dim=5120, num_heads=16),
}


def vit_size(name: str) -> dict[str, int]:
    """'B' or 'B/16' -> the size fields (and patch_size when given after the slash)."""
    size, _, patch = name.partition("/")
    if size not in VIT_SIZES:
        raise ValueError(f"unknown ViT size {name!r}; known: {sorted(VIT_SIZES)} "
                         "(optionally with /PATCH, e.g. 'B/16')")
    fields = dict(VIT_SIZES[size])
    if patch:
        fields["patch_size"] = int(patch)
    return fields


# Transformer (Vaswani et al. 2017, Table 3): num_layers (N, encoder and decoder each),
# d_model, d_ff, num_heads (h), dropout_rate (P_drop).
TRANSFORMER_SIZES: dict[str, dict[str, float]] = {
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8, dropout_rate=0.1),
    "big": dict(num_layers=6, d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3),
}

# BERT (Devlin et al. 2019; the smaller ones from Turc et al. 2019, "Well-Read Students"):
# num_layers (L), hidden_size (H), num_heads (A); the feed-forward size is 4H throughout.
BERT_SIZES: dict[str, dict[str, int]] = {
    name: dict(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden)
    for name, (layers, hidden, heads) in {
        "tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
        "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16),
    }.items()
}

# GPT-2 (Radford et al. 2019, Table 2: the four sizes by layers and d_model; heads and the
# 4 d_model feed-forward as in the released checkpoints): num_layers, d_model, num_heads, d_ff,
# with GPT-2's byte-level BPE vocabulary (50,257) and 1,024 learned positions. Built with
# tied embeddings these have exactly the parameter counts of Hugging Face's GPT2LMHeadModel
# (GPT2_PARAMETERS; tests/test_decoder_lm.py checks both).
GPT2_SIZES: dict[str, dict[str, int]] = {
    name: dict(num_layers=layers, d_model=width, num_heads=heads, d_ff=4 * width,
               vocab_size=50257, max_length=1024)
    for name, (layers, width, heads) in {
        "small": (12, 768, 12), "medium": (24, 1024, 16), "large": (36, 1280, 20),
        "xl": (48, 1600, 25),
    }.items()
}
# Parameters of transformers' GPT2LMHeadModel(GPT2Config(n_embd, n_layer, n_head)) for each
# size, counted from its own parameter shapes (the paper's Table 2 lists 117M, 345M, 762M and
# 1542M).
GPT2_PARAMETERS: dict[str, int] = {"small": 124_439_808, "medium": 354_823_168,
                                   "large": 774_030_080, "xl": 1_557_611_200}

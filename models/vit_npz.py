"""The original ViT checkpoints (``.npz``) in and out: google-research/vision_transformer (the
paper's and the AugReg "How to train your ViT?" checkpoints) and google-research/big_vision.

    cfg, params = load_npz("ViT-B_16.npz")                  # sizes read off the shapes
    cfg, params = load_npz("B_16-i21k-...npz", image_size=(224, 224))   # non-square grids
    read_npz_architecture("x.npz", run_image_size=(192, 384))  # a non-square table: the run's
    save_npz("out.npz", cfg, params)                          # vision_transformer's layout

An ``.npz`` holds the Flax parameter tree flattened with '/' and nothing else: no config. So the
model is read off the tensors: the patch size, channels and width from ``embedding/kernel``
[P, P, C, D], the depth from the ``encoderblock_i`` present, the heads from a query kernel
[D, n, d], the MLP width, the class token (``cls``: pool 'cls', else the published 'gap', our
'mean'), the pre-logits and head widths, and the patch grid from the position table (square
unless ``image_size`` says otherwise; a table of no square length is read at the grid of
``run_image_size``, the image size of the run that starts from it, when that grid has its
length). What the names cannot tell comes from the published code:
LayerNorm epsilon 1e-6 and Flax's ``nn.gelu``, the tanh approximation (our 'gelu_tanh'), both
overridable. Written: a square patch grid only (`_check_square`), in float32 (bfloat16 params
cast, as the published checkpoints are float32).

The two layouts (``layout='auto'`` tells them apart by the position table's name; the block's
submodule numbers differ because vision_transformer's files were written by the pre-Linen
flax.nn, which numbered a block's submodules all together, big_vision's by Linen, per class):
  'vit'         Transformer/posembed_input/pos_embedding [1, T, D] (the class token's row first)
                Transformer/encoderblock_i/{LayerNorm_0, MultiHeadDotProductAttention_1,
                LayerNorm_2, MlpBlock_3/Dense_0, MlpBlock_3/Dense_1}, Transformer/encoder_norm
  'big_vision'  pos_embedding [1, N, D] at the top, patches only: the class token is appended
                after the positions are added, so it has no row; blocks with LayerNorm_0,
                MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0/Dense_0, Dense_1.
                Read into our table with a zero class row; written with the class row folded
                into ``cls`` (cls + its position, which is what our model adds).
Both: embedding/kernel [P, P, C, D] (a conv kernel; our Dense over patches flattened in (row,
column, channel) order is the same matrix, models/vit.py eq. 1), embedding/bias, cls [1, 1, D],
attention kernels [D, n, d] / [n, d, D] as ours, optional pre_logits/{kernel, bias} (tanh) and
head/{kernel, bias}. Not read: hybrid ResNet stems, MAP-head pooling, scanned block stacks
(``encoderblock`` with a leading layer axis), sin-cos position embeddings (no table); the strict
name check names them.

Pure NumPy (plus our ViTConfig): it never imports train or data.
"""

from __future__ import annotations

import os
import pathlib
import re
import tempfile
import zipfile
from typing import Any, Mapping

import numpy as np

from models.param_tables import Entry, numpy_dtype, tensors_from_tree, tree_from_tensors, unboxed
from models.safetensors_file import CheckpointError
from models.vit import ViTConfig
from models.vit_transfer import HEAD, PRE_LOGITS, input_channels, with_layer_layout

LAYOUTS = ("auto", "vit", "big_vision")
# Per layout: the position table's name, and the block's submodule names (attention norm,
# attention, MLP norm, MLP).
_POSEMB = {"vit": "Transformer/posembed_input/pos_embedding", "big_vision": "pos_embedding"}
_BLOCK = {"vit": ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"),
          "big_vision": ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1",
                         "MlpBlock_0")}
PUBLISHED = {"activation": "gelu_tanh", "layer_norm_eps": 1e-6}  # flax nn.gelu, nn.LayerNorm
_BLOCK_NAME = re.compile(r"^Transformer/encoderblock_(\d+)/")
_GRID_ROW = "posemb_patches"  # big_vision's patch-only table, before the class row is added


def _detect_layout(names) -> str:
    found = [layout for layout, name in _POSEMB.items() if name in names]
    if len(found) != 1:
        scanned = any(n.startswith("Transformer/encoderblock/") for n in names)
        raise CheckpointError(
            "not a ViT .npz we read: " + (f"both {list(_POSEMB.values())}" if found else
                                          f"no position table ({' or '.join(_POSEMB.values())})")
            + ("; its blocks are scanned (Transformer/encoderblock/... with a leading layer "
               "axis): save it unscanned" if scanned else
               "; sin-cos or no position embeddings are not read" if not found else ""))
    return found[0]


def _mapping(cfg: ViTConfig, channels: int, layout: str, has_head: bool) -> list[Entry]:
    """Our ViT's parameters and the layout's names for them."""
    _check_convertible(cfg)
    D, F, P, C = cfg.hidden_size, cfg.mlp_dim, cfg.patch_size, channels
    n, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    patches = cfg.grid[0] * cfg.grid[1]
    entries = []

    def add(path, name, shape, theirs=None):
        entries.append(Entry(tuple(path.split("/")), name, tuple(shape), "=", theirs))

    def dense(path, name, fan_in, fan_out):
        add(f"{path}/kernel", f"{name}/kernel", (fan_in, fan_out))
        add(f"{path}/bias", f"{name}/bias", (fan_out,))

    def norm(path, name):
        add(f"{path}/scale", f"{name}/scale", (D,))
        add(f"{path}/bias", f"{name}/bias", (D,))

    add("patch_embedding/kernel", "embedding/kernel", (P * P * C, D), (P, P, C, D))
    add("patch_embedding/bias", "embedding/bias", (D,))
    if cfg.pool == "cls":
        add("cls", "cls", (1, 1, D))
    if layout == "vit":
        tokens = cfg.num_prefix_tokens + patches
        add("posemb/embedding", _POSEMB[layout], (tokens, D), (1, tokens, D))
    else:  # the class token has no row here (module docstring)
        add(_GRID_ROW, _POSEMB[layout], (patches, D), (1, patches, D))
    ln_att, attention, ln_mlp, mlp = _BLOCK[layout]
    for i in range(cfg.num_layers):
        ours, theirs = f"block_{i}", f"Transformer/encoderblock_{i}"
        norm(f"{ours}/norm_attention", f"{theirs}/{ln_att}")
        for proj in ("query", "key", "value"):
            add(f"{ours}/attention/{proj}/kernel", f"{theirs}/{attention}/{proj}/kernel", (D, n, d))
            add(f"{ours}/attention/{proj}/bias", f"{theirs}/{attention}/{proj}/bias", (n, d))
        add(f"{ours}/attention/out/kernel", f"{theirs}/{attention}/out/kernel", (n, d, D))
        add(f"{ours}/attention/out/bias", f"{theirs}/{attention}/out/bias", (D,))
        norm(f"{ours}/norm_mlp", f"{theirs}/{ln_mlp}")
        dense(f"{ours}/mlp/wi", f"{theirs}/{mlp}/Dense_0", D, F)
        dense(f"{ours}/mlp/wo", f"{theirs}/{mlp}/Dense_1", F, D)
    norm("final_norm", "Transformer/encoder_norm")
    if cfg.head_hidden_size:
        dense(PRE_LOGITS, PRE_LOGITS, D, cfg.head_hidden_size)
    if has_head:
        dense(HEAD, HEAD, cfg.head_hidden_size or D, cfg.num_classes)
    return entries


def _check_square(cfg: ViTConfig) -> None:
    """CheckpointError unless cfg's patch grid is square. The .npz keeps the position table flat
    ([1, T, D]) and no config: every reader takes its grid for the square of side sqrt(T)
    (vision_transformer's and big_vision's resample_posemb, our load_npz without image_size), so
    a 2 x 8 grid would come back as 4 x 4, silently, and a 2 x 3 one not at all. A user of these
    files expects square grids (every published one is); the HF format keeps [H, W]."""
    if cfg.grid[0] != cfg.grid[1]:
        raise CheckpointError(
            f"image_size={tuple(cfg.image_size)} with {cfg.patch_size}-pixel patches makes a "
            f"{cfg.grid[0]}x{cfg.grid[1]} patch grid, which an .npz cannot record (its readers "
            "take the position table for a square grid): export to the Hugging Face format "
            "(models/hf_vit.py, `python -m train.export --format hf`), which keeps image_size "
            "[H, W], or train at a square image size")


def _check_convertible(cfg: ViTConfig, computed: Mapping[str, Any] = {}) -> None:
    """CheckpointError unless the layouts hold `cfg`'s parameters (and, writing, unless the
    published code computes what cfg does: `computed`, PUBLISHED)."""
    wanted = {"posemb": "learned_1d", "posemb_mode": "stem", "stem_channels": 0,
              "norm": "layernorm",
              "norm_position": "pre", "distill_token": False, **computed}
    differ = [k for k, v in wanted.items() if getattr(cfg, k) != v]
    if differ:
        raise CheckpointError(
            "this ViT is not one the .npz layouts describe: "
            + ", ".join(f"{k}={getattr(cfg, k)!r} (the published code: {wanted[k]!r})"
                        for k in differ)
            + ("; the HF format (models/hf_vit.py) also writes other activations and epsilons"
               if set(differ) & set(computed) else ""))


# ----------------------------------------------------------------------------- the model, read off


def _architecture(shapes: Mapping[str, tuple[int, ...]], layout: str,
                  image_size: tuple[int, int] | None, overrides: dict,
                  run_image_size: tuple[int, int] | None = None
                  ) -> tuple[ViTConfig, int, bool]:
    """(cfg, channels, has_head) from the tensors' names and shapes (module docstring)."""
    def shape(name):
        if name not in shapes:
            raise CheckpointError(f"not a ViT .npz we read ({layout} layout): no {name!r}")
        return shapes[name]

    p, q, channels, width = shape("embedding/kernel")
    if p != q:
        raise CheckpointError(f"embedding/kernel {list(shapes['embedding/kernel'])}: patches "
                              f"of {p} x {q} pixels; our ViT's patches are square")
    query = shape(f"Transformer/encoderblock_0/{_BLOCK[layout][1]}/query/kernel")
    blocks = {int(m.group(1)) for n in shapes if (m := _BLOCK_NAME.match(n))}
    mlp_dim = shape(f"Transformer/encoderblock_0/{_BLOCK[layout][3]}/Dense_0/kernel")[1]
    pool = "cls" if "cls" in shapes else "mean"
    rows = shape(_POSEMB[layout])[1] - (pool == "cls" and layout == "vit")
    run_grid = None if run_image_size is None else (run_image_size[0] // p,
                                                    run_image_size[1] // p)
    side = int(round(rows ** 0.5))
    if image_size is None and side * side != rows and run_grid and (
            run_grid[0] * run_grid[1] == rows):
        # Not square, so not a published grid: the run's, which has the table's length, is
        # the only one a user can mean. (A square table stays square even where a run's
        # non-square grid has as many patches: every published checkpoint is square, and
        # reading one as 7 x 28 would scramble its 14 x 14 positions.)
        image_size = (run_grid[0] * p, run_grid[1] * p)
    if image_size is None:
        if side * side != rows:
            raise CheckpointError(
                f"{_POSEMB[layout]} holds {rows} patch positions, not a square grid"
                + (f" nor the {run_grid[0]}x{run_grid[1]} grid of the run's image size "
                   f"{tuple(run_image_size)} ({p}-pixel patches): use an image size whose "
                   f"grid has {rows} patches" if run_grid else
                   ": pass image_size=(height, width)"))
        image_size = (side * p, side * p)
    elif (image_size[0] // p) * (image_size[1] // p) != rows:
        raise CheckpointError(f"image_size={tuple(image_size)} with {p}-pixel patches makes "
                              f"{(image_size[0] // p) * (image_size[1] // p)} patches; "
                              f"{_POSEMB[layout]} holds {rows}")
    head_hidden = shapes["pre_logits/kernel"][-1] if "pre_logits/kernel" in shapes else 0
    has_head = "head/kernel" in shapes
    fields = dict(image_size=tuple(image_size), patch_size=p, hidden_size=width,
                  num_layers=max(blocks) + 1, num_heads=query[1], mlp_dim=mlp_dim,
                  posemb="learned_1d", pool=pool, head_hidden_size=head_hidden, stem_channels=0,
                  norm="layernorm", norm_position="pre",
                  num_classes=shapes["head/kernel"][-1] if has_head else 1, **PUBLISHED)
    fields.update(overrides)
    try:
        return ViTConfig(**fields), channels, has_head
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"the tensors give an invalid ViTConfig: {e}") from e


def npz_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """{name: shape} of an .npz file's arrays from their .npy headers alone (no data read).
    CheckpointError naming the first array stored as raw bytes (a void dtype such as '|V2':
    what np.savez makes of bfloat16, a type NumPy lacks), whose numbers no reader can know."""
    shapes, raw = {}, {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                with archive.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                            np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read(f)
                    shapes[member.removesuffix(".npy")] = tuple(shape)
                    if dtype.kind == "V":
                        raw[member.removesuffix(".npy")] = dtype
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: not a readable .npz file ({e})") from e
    if raw:
        name, dtype = next(iter(raw.items()))
        more = f" (and {len(raw) - 1} more arrays)" if len(raw) > 1 else ""
        raise CheckpointError(
            f"{path}: {name!r}{more} is stored as raw bytes (dtype {dtype.str!r}), not numbers: "
            "np.savez writes bfloat16 arrays so. Save the arrays as float32 (the published "
            "checkpoints' dtype; `python -m train.export` casts bfloat16 to it)")
    return shapes


def read_npz_architecture(path: str | os.PathLike, *, image_size: tuple[int, int] | None = None,
                          run_image_size: tuple[int, int] | None = None, layout: str = "auto",
                          **overrides) -> tuple[ViTConfig, int, bool]:
    """(cfg, channels, has_head) of an .npz checkpoint without reading its weights; the
    arguments as in `load_npz`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {list(LAYOUTS)}")
    shapes = npz_shapes(path)
    layout = _detect_layout(shapes) if layout == "auto" else layout
    try:
        return _architecture(shapes, layout, image_size, overrides, run_image_size)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e


def params_from_npz(tensors: Mapping[str, np.ndarray], cfg: ViTConfig, *, channels: int,
                    layout: str = "auto", has_head: bool = True) -> dict:
    """Our params (NumPy, ``cfg.param_dtype``, cfg's layer layout; without ``head`` when
    not `has_head`) from the .npz tensors {name: array}. CheckpointError listing every
    missing, unexpected and mis-shaped tensor."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {list(LAYOUTS)}")
    layout = _detect_layout(tensors) if layout == "auto" else layout
    params = tree_from_tensors(
        _mapping(cfg, channels, layout, has_head), tensors,
        f"checkpoint tensors do not match a {layout} ViT (image_size={cfg.image_size}, "
        f"patch_size={cfg.patch_size}, channels={channels}, hidden_size={cfg.hidden_size}, "
        f"num_layers={cfg.num_layers}, num_heads={cfg.num_heads}, mlp_dim={cfg.mlp_dim}, "
        f"pool={cfg.pool!r}, head_hidden_size={cfg.head_hidden_size}"
        + (f", num_classes={cfg.num_classes})" if has_head else ", no head)"),
        dtype=numpy_dtype(cfg.param_dtype))
    if _GRID_ROW in params:
        grid = params.pop(_GRID_ROW)
        prefix = np.zeros((cfg.num_prefix_tokens, grid.shape[1]), grid.dtype)
        params["posemb"] = {"embedding": np.concatenate([prefix, grid])}
    return with_layer_layout(params, cfg.scan_layers)


def params_to_npz(params: Mapping, cfg: ViTConfig, *, layout: str = "vit") -> dict[str, np.ndarray]:
    """The .npz tensors {name: array} of our ViT's params (boxed, JAX, either layer layout,
    ``{"params": ...}`` accepted) in `layout` 'vit' or 'big_vision'."""
    if layout not in ("vit", "big_vision"):
        raise ValueError(f"layout={layout!r} is not one of ['vit', 'big_vision']")
    if set(params) == {"params"}:
        params = params["params"]
    _check_convertible(cfg, PUBLISHED)
    _check_square(cfg)
    params = with_layer_layout(unboxed(params), scan=False)
    channels = input_channels(params, cfg)
    if layout == "big_vision" and "posemb" in params:
        table = np.asarray(params["posemb"]["embedding"])
        prefix = cfg.num_prefix_tokens
        if prefix:  # big_vision adds no position to the class token: fold ours into it
            params["cls"] = np.asarray(params["cls"]) + table[:prefix][None]
        params = {**{k: v for k, v in params.items() if k != "posemb"}, _GRID_ROW: table[prefix:]}
    tensors = tensors_from_tree(_mapping(cfg, channels, layout, HEAD in params), params,
                                f"params do not match our ViT in the {layout} .npz layout")
    # ml_dtypes' floats (bfloat16, a param_dtype='bfloat16' run's) are no .npy dtype: np.savez
    # would write their raw bytes ('|V2'). float32, the published checkpoints', holds them all.
    return {name: x.astype(np.float32) if x.dtype.kind == "V" else x
            for name, x in tensors.items()}


def load_npz(path: str | os.PathLike, *, image_size: tuple[int, int] | None = None,
             run_image_size: tuple[int, int] | None = None, layout: str = "auto",
             **overrides) -> tuple[ViTConfig, dict]:
    """(cfg, params) of an .npz checkpoint; params without ``head`` when it has none (then
    cfg.num_classes is 1 unless overridden: a run adds its own head, models/vit_transfer.py).
    `image_size` (height, width) for a non-square patch grid (default: square, from the position
    table); `run_image_size` instead: the image size of a run to start from it, whose patch grid
    is taken for a table of no square length that has the grid's (module docstring); `layout`
    'vit' | 'big_vision' | 'auto'; `overrides` set ViTConfig fields (activation,
    layer_norm_eps, dtype, ...)."""
    cfg, channels, has_head = read_npz_architecture(
        path, image_size=image_size, run_image_size=run_image_size, layout=layout, **overrides)
    try:
        with np.load(path, allow_pickle=False) as archive:
            tensors = {name: archive[name] for name in archive.files}
        return cfg, params_from_npz(tensors, cfg, channels=channels, layout=layout,
                                    has_head=has_head)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e


def save_npz(path: str | os.PathLike, cfg: ViTConfig, params: Mapping, *,
             layout: str = "vit") -> pathlib.Path:
    """Writes our ViT's params as an .npz in `layout` ('vit': vision_transformer / AugReg;
    'big_vision'), float32, through a temporary file renamed over `path`. CheckpointError for
    a model the layouts cannot describe, a non-square patch grid included."""
    path = pathlib.Path(path)
    tensors = params_to_npz(params, cfg, layout=layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **tensors)
        os.chmod(tmp, 0o644)  # mkstemp made it private; an exported checkpoint is to be shared
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path

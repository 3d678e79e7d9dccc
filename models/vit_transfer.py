"""A trained ViT's parameters made fit for another ViT run: another resolution, another number
of classes, grey images instead of RGB (fine-tuning, Dosovitskiy et al. 2021, Sec. 3.2 and
App. B.1.1), computed in NumPy on parameter trees; the checkpoint converters (models/hf_vit.py,
models/vit_npz.py) and the fine-tuning init (train/vit_init.py) use it.

    plan = plan_transfer(source_cfg, run_cfg, source_channels=3, target_channels=1)
    params = transfer(checkpoint_params, plan)   # without the parts `plan.fresh` names
    print(*plan.notes, sep="\n")

What may differ between the checkpoint's model (`source`) and the run's (`target`) are the
fields of `RUN_FIELDS`; every other field is the architecture, which the weights fix:

  image_size   with learned 1-D position embeddings the patch grid's part of the table is
               resampled bilinearly to the new grid, the class token's row kept apart
               (`resample_posemb`; the patches at their centres, or the corner ones
               aligned). Other parameter-free encodings (sincos_2d, rope_2d, alibi_2d, none)
               work at any grid as they are; 'learned_2d' and 'relative' tables
               are not resampled (an error says so).
  num_classes, head_hidden_size
               the head (`head`, and the tanh pre-logits layer `pre_logits`) is kept when its
               shapes fit the run's model and a new head is not asked for; otherwise the run's
               model initialises it (a zero classifier: the paper's "single, zero-initialized
               linear layer", App. B.1.1; head_hidden_size=0 drops the pre-logits layer, as the
               paper does when it transfers).
  probe_norm   a linear probe's fixed feature standardisation (models.vit.ProbeNorm): never
               carried over; its statistics are the run's own (the task computes them), and a
               head trained on standardised features is kept only by a run that has them too.
  channels     (not a config field: the first kernel's input width) an RGB checkpoint read by a
               model of grey images gets its first kernel summed over the colour axis: a grey
               image is the RGB image with three equal channels, so the embedding is exact.
  dropout rates, stochastic depth, dtypes, attention implementation, remat, scan_layers:
               settings of the run; the layer layout (loop or scan, models/stack.py) is
               converted.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from models.stack import to_layout
from models.vit import ViTConfig

LAYER_PREFIX, SCAN_NAME = "block_", "blocks"  # models/vit.py's run_blocks defaults
HEAD, PRE_LOGITS, PROBE_NORM = "head", "pre_logits", "probe_norm"
DIST_HEAD = "head_dist"  # DeiT's distillation head (models/vit.py distill_token), kept or new
                         # with the class head
RUN_FIELDS = ("num_classes", "image_size", "head_hidden_size", "probe_norm", "dropout_rate",
              "attention_dropout_rate", "attention_implementation", "dtype", "param_dtype",
              "remat", "scan_layers", "drop_path_rate")
# Tables sized by the patch grid that are not resampled: the 2-D row/column tables, the 2-D
# scalar bias, and the 1-D relative attention's per-layer keys (one per patch offset).
GRID_TABLES = {"learned_2d": "posemb", "relative_bias_2d": "relative_bias",
               "relative": "rel_embedding"}


def with_layer_layout(params: Mapping[str, Any], scan: bool) -> dict[str, Any]:
    """A ViT's parameters with its blocks in the scan layout (``scan=True``: one ``blocks``
    subtree, leading layer axis) or the loop layout (``block_0 ..``), whichever they hold now."""
    return to_layout(params, scan, LAYER_PREFIX, SCAN_NAME)


def input_channels(params: Mapping[str, Any], cfg: ViTConfig) -> int:
    """The image channels a ViT's parameters read: the input width of its first kernel (the
    stem's [3, 3, C, S], or the patch embedding's [P * P * C, D])."""
    if cfg.stem_channels:
        return int(np.shape(params["stem"]["kernel"])[2])
    rows = int(np.shape(params["patch_embedding"]["kernel"])[0])
    if rows % (cfg.patch_size ** 2):
        raise ValueError(f"a patch embedding of {rows} rows is not {cfg.patch_size}^2 x channels")
    return rows // cfg.patch_size ** 2


# ViT paper Sec. 3.2: "we perform 2D interpolation of the pre-trained position embeddings,
# according to their location in the original image". Where a patch is: at its cell's centre
# ('centres'), or, as the released code's scipy.ndimage.zoom(order=1) has it, the first and last
# patches at the grid's two ends ('corners').
ALIGNS = ("centres", "corners")


def bilinear_matrix(n_in: int, n_out: int, align: str = "centres") -> np.ndarray:
    """[n_out, n_in] weights of 1-D linear interpolation from n_in cells to n_out cells over the
    same extent: output cell i reads the input at coordinate x as
    (1 - t) v[floor x] + t v[floor x + 1] with t = x - floor x, where x is, with each cell at
    its centre ('centres', (i + 1/2) / n_out of the extent), (i + 1/2) n_in / n_out - 1/2
    clamped to [0, n_in - 1]; with the end cells on the ends ('corners'),
    i (n_in - 1) / (n_out - 1)."""
    if align not in ALIGNS:
        raise ValueError(f"align={align!r} is not one of {list(ALIGNS)}")
    if align == "corners":
        x = np.arange(n_out) * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        x = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    t = x - lo
    weights = np.zeros((n_out, n_in))
    np.add.at(weights, (np.arange(n_out), lo), 1.0 - t)
    np.add.at(weights, (np.arange(n_out), hi), t)
    return weights


def resample_posemb(table: np.ndarray, old_grid: tuple[int, int], new_grid: tuple[int, int],
                    num_prefix_tokens: int, align: str = "centres") -> np.ndarray:
    """A learned 1-D position table [prefix + old_h * old_w, D] (prefix rows first, then the
    patches in row-major order, models/vit.py) resampled to [prefix + new_h * new_w, D]: the
    prefix (class token) rows kept as they are, the patch rows, seen as an old_h x old_w grid,
    bilinearly interpolated to new_h x new_w (separably: rows, then columns; `align` as in
    `bilinear_matrix`), in float64."""
    (gh, gw), (nh, nw) = tuple(old_grid), tuple(new_grid)
    table = np.asarray(table)
    if table.ndim != 2 or table.shape[0] != num_prefix_tokens + gh * gw:
        raise ValueError(f"a position table of shape {table.shape} is not {num_prefix_tokens} + "
                         f"{gh} x {gw} rows of one width")
    prefix, grid = table[:num_prefix_tokens], table[num_prefix_tokens:].reshape(gh, gw, -1)
    resized = np.einsum("ih,jw,hwd->ijd", bilinear_matrix(gh, nh, align),
                        bilinear_matrix(gw, nw, align), grid.astype(np.float64))
    return np.concatenate([prefix, resized.reshape(nh * nw, -1).astype(table.dtype)])


@dataclasses.dataclass(frozen=True)
class TransferPlan:
    """What `transfer` does to a checkpoint of `source` for a run of `target` (module
    docstring). `fresh`: the top-level parameters the run's model initialises itself."""

    source: ViTConfig
    target: ViTConfig
    source_channels: int
    target_channels: int
    resample: bool
    sum_channels: bool
    fresh: tuple[str, ...]
    notes: tuple[str, ...]
    posemb_align: str = "centres"  # how a resampled table's patches sit (`bilinear_matrix`)


def _architecture(cfg: ViTConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if f.name not in RUN_FIELDS}


def plan_transfer(source: ViTConfig, target: ViTConfig, *, source_channels: int,
                  target_channels: int, has_head: bool = True,
                  new_head: bool = False, posemb_align: str = "centres") -> TransferPlan:
    """The TransferPlan of a checkpoint of `source` (reading `source_channels` channels; with a
    classifier when `has_head`, with a pre-logits layer when source.head_hidden_size > 0) for a
    run of `target`. `new_head`: never keep the checkpoint's head; `posemb_align`: where the
    patches of a resampled table sit (`bilinear_matrix`). ValueError naming what cannot be
    carried over."""
    if posemb_align not in ALIGNS:
        raise ValueError(f"posemb_align={posemb_align!r} is not one of {list(ALIGNS)}")
    ours, theirs = _architecture(target), _architecture(source)
    differ = [f"{k}: checkpoint {theirs[k]!r}, run {ours[k]!r}" for k in ours
              if ours[k] != theirs[k]]
    if differ:
        raise ValueError("the run's model has another architecture than the checkpoint's "
                         f"({'; '.join(differ)}); only {list(RUN_FIELDS)} may differ")
    notes = []
    resample = source.grid != target.grid
    if resample:
        where = (f"image {source.image_size[0]}x{source.image_size[1]} -> "
                 f"{target.image_size[0]}x{target.image_size[1]}, patch grid "
                 f"{source.grid[0]}x{source.grid[1]} -> {target.grid[0]}x{target.grid[1]}")
        if source.posemb_mode != "stem" and source.posemb in ("learned_1d", "learned_2d"):
            raise ValueError(f"posemb_mode={source.posemb_mode!r}: the learned position tables "
                             f"added at every layer are not resampled ({where}); fine-tune at "
                             "the checkpoint's image_size")
        if source.posemb in GRID_TABLES:
            raise ValueError(f"posemb={source.posemb!r}: its {GRID_TABLES[source.posemb]!r} "
                             f"table is sized by the patch grid and is not resampled ({where}); "
                             "fine-tune at the checkpoint's image_size")
        if source.posemb == "learned_1d":
            how = ("each patch at its centre" if posemb_align == "centres" else
                   "the corner patches on each other, as the released code")
            notes.append(f"position embeddings resampled bilinearly, {how} ({where}; ViT "
                         "Sec. 3.2)"
                         + (", class token's kept" if source.num_prefix_tokens else ""))
        else:
            notes.append(f"posemb={source.posemb!r} has no table: nothing to resample ({where})")
        resample = source.posemb == "learned_1d"
    sum_channels = source_channels != target_channels
    if sum_channels:
        if (source_channels, target_channels) != (3, 1):
            raise ValueError(f"the checkpoint reads {source_channels}-channel images, the run's "
                             f"data has {target_channels}; only RGB weights for grey images "
                             "convert (grey = three equal channels)")
        first = "stem" if source.stem_channels else "patch embedding"
        notes.append(f"RGB {first} kernel summed over its colour axis for grey images (exact: "
                     "grey = three equal channels)")
    # The head is kept only whole: a classifier trained on tanh(pre-logits) means nothing on
    # the encoder's output, and the other way round.
    same_head = (source.head_hidden_size == target.head_hidden_size
                 and source.probe_norm == target.probe_norm and not new_head)
    fresh = [PROBE_NORM] if target.probe_norm else []
    if target.head_hidden_size and not same_head:
        fresh.append(PRE_LOGITS)
        notes.append(f"new pre-logits layer of width {target.head_hidden_size}")
    elif source.head_hidden_size and not target.head_hidden_size:
        notes.append("pre-logits layer dropped (head_hidden_size=0; ViT App. B.1.1)")
    if has_head and same_head and source.num_classes == target.num_classes:
        notes.append(f"classifier kept ({target.num_classes} classes)")
    else:
        fresh += [HEAD, DIST_HEAD] if target.distill_token else [HEAD]
        why = ("the checkpoint has none" if not has_head else
               f"the checkpoint's has {source.num_classes}"
               if source.num_classes != target.num_classes else
               "a new head asked for" if new_head else
               "its input is standardised in one and not the other (probe_norm)"
               if source.probe_norm != target.probe_norm else "the pre-logits layer changed")
        notes.append(f"new zero-initialised classifier for {target.num_classes} classes ({why})")
    return TransferPlan(source, target, source_channels, target_channels, resample,
                        sum_channels, tuple(fresh), tuple(notes), posemb_align)


def transfer(params: Mapping[str, Any], plan: TransferPlan) -> dict[str, Any]:
    """The checkpoint's `params` (NumPy, either layer layout) carried over as `plan` says, in
    the target's layer layout, without the parts in `plan.fresh` (and without a pre-logits
    layer the target has none of)."""
    source, target = plan.source, plan.target
    params = with_layer_layout(params, scan=False)
    params = {k: v for k, v in params.items() if k not in (*plan.fresh, PROBE_NORM)}
    if not target.head_hidden_size:
        params.pop(PRE_LOGITS, None)
    if plan.resample:
        table = params["posemb"]["embedding"]
        params["posemb"] = {"embedding": resample_posemb(
            table, source.grid, target.grid, source.num_prefix_tokens, plan.posemb_align)}
    if plan.sum_channels:
        if source.stem_channels:
            kernel = np.asarray(params["stem"]["kernel"])           # [3, 3, C, S]
            params["stem"] = {**params["stem"], "kernel": kernel.sum(axis=2, keepdims=True)}
        else:
            kernel = np.asarray(params["patch_embedding"]["kernel"])  # [P * P * C, D]
            p = source.patch_size
            summed = kernel.reshape(p, p, plan.source_channels, -1).sum(axis=2)
            params["patch_embedding"] = {**params["patch_embedding"],
                                         "kernel": summed.reshape(p * p, -1)}
    return with_layer_layout(params, target.scan_layers)

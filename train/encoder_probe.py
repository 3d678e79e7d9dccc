"""Measures a BERT encoder on one batch: its activations layer by layer and the gradients a
task's loss sends to each layer (train/diagnose_encoder.py runs it on pretraining checkpoints).

Per layer (index 0: the embeddings' output; i: the output of encoder layer i), with the
statistics of train/encoder_stats.py over the batch's real tokens:

  states       pairwise_cosine, common_share, effective_rank, identity_readout (against the
               encoder's own word embeddings) and the mean L2 norm of the hidden vectors
  attention    per head: the attention entropy and its normalised form (layers 1..L)
  sublayers    BERT's layers are post-LN: y = LN(x + Attention(x)), out = LN(y + FFN(y)). For
               each sublayer, how large its output is against the stream it is added to
               (rms(f(x)) / rms(x)) and the common share of that output: a sublayer that adds
               the same large vector at every token drowns what differs between tokens before
               the LayerNorm rescales the sum
  gelu         the feed-forward pre-activations' negative share and dead units
  norms        the LayerNorm gains (mean |scale|) and the L2 norm of their biases

With dropout (`dropout_noise`, the fine-tuning config's rates): per layer, how far dropout
moves each token's vector against how far tokens' vectors are apart (encoder_stats.
noise_to_signal).

Gradients: `gradient_groups` of the loss's gradient, one group per encoder layer, the word
embeddings, the other embeddings, the pooler and each head; `adam_groups`, from a checkpoint's
optimizer state, how large a step Adam takes there per unit of learning rate, and the size of
the gradients its second moment remembers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from models.bert import LAYER_PREFIX, BertConfig, BertModel, with_layer_layout
from train import encoder_stats
from train.tasks.base import batch_objective

CAPTURED = ("wi", "attention", "mlp", "norm_attention")  # submodules whose outputs are kept


def _captured(module, method_name: str) -> bool:
    return method_name == "__call__" and module.name in CAPTURED


def _rms(x, valid) -> float:
    v = np.broadcast_to(np.asarray(valid).astype(bool), np.shape(x)[:2])
    rows = np.asarray(x, np.float64)[v]
    return float(np.sqrt(np.mean(rows * rows))) if rows.size else 0.0


def loop_layout(cfg: BertConfig, bert_params) -> tuple[BertConfig, Any]:
    """The encoder as unrolled layers (layer_0 ..), without remat: the layout whose
    intermediates are read below, the same function of the same parameters."""
    cfg = dataclasses.replace(cfg, scan_layers=False, remat="none")
    return cfg, with_layer_layout(bert_params, scan=False)


def run_encoder(cfg: BertConfig, bert_params, input_ids, segment_ids, input_mask):
    """(hidden states: a tuple of L + 1 [b, l, H], intermediates of each layer: a list of L
    dicts with 'probs' [b, h, l, l], 'attention' and 'mlp' (sublayer outputs), 'attention_norm'
    (y) and 'wi' (the FFN pre-activations)), deterministic (no dropout)."""
    cfg, bert_params = loop_layout(cfg, bert_params)
    (_, _, states), variables = BertModel(cfg).apply(
        {"params": bert_params}, input_ids, segment_ids, input_mask, train=False,
        output_hidden_states=True, capture_intermediates=_captured, mutable=["intermediates"])
    encoder = variables["intermediates"]["encoder"]
    layers = []
    for i in range(cfg.num_layers):
        layer = encoder[f"{LAYER_PREFIX}{i}"]
        layers.append({"probs": layer["attention"]["attention_weights"][0],
                       "attention": layer["attention"]["__call__"][0],
                       "attention_norm": layer["norm_attention"]["__call__"][0],
                       "mlp": layer["mlp"]["__call__"][0],
                       "wi": layer["mlp"]["wi"]["__call__"][0]})
    return states, layers


def dropout_noise(cfg: BertConfig, bert_params, input_ids, segment_ids, input_mask, rng
                  ) -> list[float]:
    """encoder_stats.noise_to_signal of each layer's hidden states (index 0..L) with the
    dropout of `cfg` (rng 'dropout' = `rng`) against the same states without it."""
    cfg, bert_params = loop_layout(cfg, bert_params)
    model = BertModel(cfg)
    clean = model.apply({"params": bert_params}, input_ids, segment_ids, input_mask,
                        train=False, output_hidden_states=True)[2]
    noisy = model.apply({"params": bert_params}, input_ids, segment_ids, input_mask,
                        train=True, output_hidden_states=True, rngs={"dropout": rng})[2]
    return [encoder_stats.noise_to_signal(c, n, input_mask) for c, n in zip(clean, noisy)]


def state_stats(states, input_ids, embeddings, valid) -> dict[str, float]:
    """The encoder_stats of one layer's hidden states [b, l, H]."""
    norms = np.linalg.norm(np.asarray(states, np.float64), axis=-1)
    v = np.broadcast_to(np.asarray(valid).astype(bool), norms.shape)
    return {"cosine": float(encoder_stats.pairwise_cosine(states, valid)),
            "common_share": encoder_stats.common_share(states, valid),
            "effective_rank": encoder_stats.effective_rank(states, valid),
            "identity_readout": float(encoder_stats.identity_readout(
                states, input_ids, embeddings, valid)),
            "norm": float(norms[v].mean())}


def _norm_params(norm) -> dict[str, float]:
    return {"gain": float(np.mean(np.abs(norm["scale"]))),
            "bias_norm": float(np.linalg.norm(norm["bias"]))}


def encoder_report(cfg: BertConfig, bert_params, input_ids, segment_ids, input_mask
                   ) -> list[dict[str, Any]]:
    """One dict per layer index 0..L (module docstring) for this batch."""
    states, layers = run_encoder(cfg, bert_params, input_ids, segment_ids, input_mask)
    _, params = loop_layout(cfg, bert_params)
    embeddings = params["embeddings"]["word_embeddings"]["embedding"]
    valid = input_mask
    report = [{"layer": 0, "states": state_stats(states[0], input_ids, embeddings, valid),
               "norms": {"embeddings": _norm_params(params["embeddings"]["norm"])}}]
    for i, layer in enumerate(layers):
        entropy = encoder_stats.attention_entropy(layer["probs"], valid)
        layer_params = params["encoder"][f"{LAYER_PREFIX}{i}"]
        report.append({
            "layer": i + 1,
            "states": state_stats(states[i + 1], input_ids, embeddings, valid),
            "attention": {key: [float(x) for x in value] for key, value in entropy.items()},
            "sublayers": {
                "attention": {"ratio": _rms(layer["attention"], valid) / _rms(states[i], valid),
                              "common_share": encoder_stats.common_share(layer["attention"],
                                                                         valid)},
                "mlp": {"ratio": _rms(layer["mlp"], valid) / _rms(layer["attention_norm"], valid),
                        "common_share": encoder_stats.common_share(layer["mlp"], valid)}},
            "gelu": encoder_stats.gelu_activity(layer["wi"], valid),
            "norms": {name: _norm_params(layer_params[name])
                      for name in ("norm_attention", "norm_mlp")}})
    return report


def parameter_group(path: tuple[str, ...]) -> str:
    """The group of a parameter path for gradient reports: 'encoder/layer_2', 'embeddings/word',
    'embeddings/other', 'pooler', or 'head/<name>' for what sits outside the encoder."""
    if path[0] != "bert":
        return f"head/{path[0]}"
    part = path[1]
    if part == "embeddings":
        return "embeddings/word" if path[2] == "word_embeddings" else "embeddings/other"
    if part == "encoder":
        return f"encoder/{path[2]}"
    return part


def gradient_groups(loss_fn: Callable, normalizers_fn: Callable, params, batch, rng
                    ) -> dict[str, dict[str, float]]:
    """encoder_stats.group_norms (per `parameter_group`) of the gradient of a task's objective
    (train/tasks/base.py batch_objective of `loss_fn(params, batch, rng)`'s terms) at `params`,
    the full parameter tree of the task's model (the encoder in the loop layout or scanned)."""
    def objective(p):
        terms, _ = loss_fn(p, batch, rng)
        return batch_objective(terms, normalizers_fn(batch))

    grads = jax.jit(jax.grad(objective))(params)
    if "bert" in grads:
        grads = {**grads, "bert": with_layer_layout(grads["bert"], scan=False)}
    return encoder_stats.group_norms(jax.device_get(grads), parameter_group)


def adam_moments(opt_state) -> dict | None:
    """The {'count', 'mu', 'nu'} node of Adam's state inside a saved optimizer state (nested
    dicts and lists, train/checkpointing.py load_state), or None when there is none."""
    if isinstance(opt_state, dict):
        if {"count", "mu", "nu"} <= set(opt_state):
            return opt_state
        children = opt_state.values()
    elif isinstance(opt_state, (list, tuple)):
        children = opt_state
    else:
        return None
    for child in children:
        found = adam_moments(child)
        if found is not None:
            return found
    return None


def adam_groups(opt_state, *, b1: float, b2: float, eps: float) -> dict[str, dict[str, float]]:
    """Per `parameter_group`: 'update_rms', the RMS of encoder_stats.adam_update (Adam's step
    per unit of learning rate), and 'memory_rms', the RMS of sqrt(v_hat), the gradient size its
    second moment remembers (to read against a current gradient's RMS)."""
    moments = adam_moments(opt_state)
    if moments is None:
        raise ValueError("the optimizer state holds no Adam moments ({'count', 'mu', 'nu'})")
    count = int(np.asarray(moments["count"]))
    update = jax.tree.map(lambda m, v: encoder_stats.adam_update(m, v, count, b1=b1, b2=b2,
                                                                 eps=eps),
                          moments["mu"], moments["nu"])
    memory = jax.tree.map(lambda v: np.sqrt(np.asarray(v, np.float64) / (1.0 - b2 ** count)),
                          moments["nu"])
    if "bert" in update:
        update = {**update, "bert": with_layer_layout(update["bert"], scan=False)}
        memory = {**memory, "bert": with_layer_layout(memory["bert"], scan=False)}
    updates = encoder_stats.group_norms(update, parameter_group)
    memories = encoder_stats.group_norms(memory, parameter_group)
    return {name: {"update_rms": updates[name]["rms"], "memory_rms": memories[name]["rms"]}
            for name in updates}


def mlm_predictions(logits, batch, mask_id: int) -> dict[str, Any]:
    """Of the MLM head's predictions at the batch's predicted positions: accuracy, mean entropy
    (nats), the share of predictions equal to the most frequent prediction ('top1_share': 1 when
    the head answers the same token everywhere), and how the head ranks the position's own input
    token where it is not [MASK]: the share of the vocabulary it scores below that token (0.5:
    no preference; 1: the input is the top answer), at the positions replaced by a random token
    ('random_input_percentile', never the right answer) and at those left unchanged
    ('kept_input_percentile', always the right answer); None where the batch has none. Also the
    share of replaced positions predicted as their random input ('copies_random')."""
    logits = np.asarray(logits, np.float64)
    weights = np.asarray(batch["masked_weights"]) > 0
    if "mask" in batch:
        weights &= np.asarray(batch["mask"])[:, None] > 0
    predicted = logits.argmax(-1)
    labels = np.asarray(batch["masked_ids"])
    inputs = np.take_along_axis(np.asarray(batch["input_ids"]),
                                np.asarray(batch["masked_positions"]), axis=1)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    entropy = -(np.exp(log_p) * log_p).sum(-1)
    chosen = predicted[weights]
    top = np.bincount(chosen).max() if chosen.size else 0
    input_logit = np.take_along_axis(logits, inputs[..., None], axis=-1)
    percentile = (logits < input_logit).mean(-1)
    replaced = weights & (inputs != labels) & (inputs != mask_id)
    kept = weights & (inputs == labels) & (inputs != mask_id)

    def mean_or_none(values, where):
        return float(values[where].mean()) if where.any() else None

    return {"accuracy": float((predicted == labels)[weights].mean()),
            "entropy": float(entropy[weights].mean()),
            "top1_share": float(top / max(chosen.size, 1)),
            "random_input_percentile": mean_or_none(percentile, replaced),
            "kept_input_percentile": mean_or_none(percentile, kept),
            "copies_random": mean_or_none((predicted == inputs).astype(float), replaced),
            "random_positions": int(replaced.sum())}


def embedding_report(word_embeddings, mask_id: int) -> dict[str, float]:
    """The [MASK] row of the word embeddings against the table: its norm, the mean row norm,
    its cosine with the mean row, and the common share of the whole table."""
    table = np.asarray(word_embeddings, np.float64)
    mean = table.mean(0)
    mask = table[mask_id]
    return {"mask_norm": float(np.linalg.norm(mask)),
            "mean_norm": float(np.linalg.norm(table, axis=-1).mean()),
            "mask_cosine_to_mean": float(mask @ mean / max(np.linalg.norm(mask)
                                                           * np.linalg.norm(mean), 1e-12)),
            "common_share": encoder_stats.common_share(table[None], np.ones((1, len(table))))}


def as_arrays(batch: dict) -> dict[str, jnp.ndarray]:
    """The numeric arrays of a host batch (strings, e.g. references, left out)."""
    return {k: jnp.asarray(v) for k, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}

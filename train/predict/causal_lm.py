"""Generate from a causal-LM run: `python -m train.predict WORKDIR --prompt "..."`.

    python -m train.predict workdirs/lm_english --prompt "It is a truth" --max_new_tokens 40
    python -m train.predict workdirs/lm_english --prompts_file prompts.txt --decoding sample \\
        --temperature 0.8 --top_p 0.95
    echo "The President" | python -m train.predict workdirs/lm_english --decoding beam

Prompts: every --prompt or (not both) one per line of --prompts_file, else one per line of standard
input. Each is encoded with the run's own BPE vocabulary after the EOS that begins every
document (as in training: data/pipelines/lm.py), and continued by models/lm_decode.py
`generate` until EOS or --max_new_tokens: greedy, beam search (--beam_size, --length_penalty)
or sampling (--temperature, --top_k, --top_p, --seed). Prompts go --batch_size at a time, every
batch padded to the longest prompt (one compilation), split over all local devices (the batch
is rounded up to a multiple of their number; the parameters are replicated).
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models.decoder_lm import DecoderLM, DecoderLMConfig
from models.lm_decode import generate
from models.sampling import Sampling
from train.config import ConfigError
from train.predict.texts import read_lines

DECODINGS = ("greedy", "beam", "sample")
# Each decoding's own options and their defaults: given with another --decoding, one is refused.
BEAM = {"beam_size": 4, "length_penalty": 0.6}
SAMPLE = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("causal LM (generation)")
    group.add_argument("--prompt", action="append", default=[],
                       help="a prompt (repeat for several)")
    group.add_argument("--prompts_file", help="a file of prompts, one per line")
    group.add_argument("--max_new_tokens", type=int, default=64)
    group.add_argument("--decoding", choices=DECODINGS, default="greedy")
    group.add_argument("--beam_size", type=int, default=None,
                       help=f"--decoding beam: beams (default {BEAM['beam_size']})")
    group.add_argument("--length_penalty", type=float, default=None,
                       help="--decoding beam: alpha of the length penalty (Wu et al. 2016; "
                            f"default {BEAM['length_penalty']})")
    group.add_argument("--temperature", type=float, default=None,
                       help=f"--decoding sample (default {SAMPLE['temperature']})")
    group.add_argument("--top_k", type=int, default=None,
                       help=f"--decoding sample; 0: off (default {SAMPLE['top_k']})")
    group.add_argument("--top_p", type=float, default=None,
                       help=f"--decoding sample; 1: off (default {SAMPLE['top_p']})")
    group.add_argument("--seed", type=int, default=None,
                       help=f"--decoding sample: the sampling key (default {SAMPLE['seed']})")
    group.add_argument("--batch_size", type=int, default=8, help="prompts per model call")


def read_prompts(args, stdin=None) -> list[str]:
    """The prompts (module docstring); ConfigError for none, an empty one or an unreadable
    --prompts_file (train/predict/texts.py `read_lines`, as the other predictors read theirs)."""
    return read_lines(args.prompt, args.prompts_file, what="prompt", flag="--prompt",
                      file_flag="--prompts_file", stdin=stdin)


def _model(run) -> DecoderLM:
    fields = {f.name for f in dataclasses.fields(DecoderLMConfig)}
    return DecoderLM(DecoderLMConfig(**{k: v for k, v in run.config["model"].items()
                                        if k in fields}))


def _settings(args) -> dict:
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max_new_tokens={args.max_new_tokens} must be >= 1")
    if args.batch_size < 1:
        raise ConfigError(f"--batch_size={args.batch_size} must be >= 1")
    for decoding, options in (("beam", BEAM), ("sample", SAMPLE)):
        given = [f"--{k}={getattr(args, k)}" for k in options if getattr(args, k) is not None]
        if given and args.decoding != decoding:
            raise ConfigError(f"{' '.join(given)} with --decoding {args.decoding}: "
                              f"{'they apply' if len(given) > 1 else 'it applies'} to "
                              f"--decoding {decoding} only")
    value = {k: getattr(args, k) if getattr(args, k) is not None else default
             for k, default in {**BEAM, **SAMPLE}.items()}
    if args.decoding == "beam":
        if value["beam_size"] < 2:
            raise ConfigError(f"--beam_size={value['beam_size']}: a beam search keeps at least "
                              "2 (--decoding greedy is one)")
        if not 0 <= value["length_penalty"] < float("inf"):  # NaN too
            raise ConfigError(f"--length_penalty={value['length_penalty']} must be a finite "
                              "number >= 0 (0: none)")
        return {"beam_size": value["beam_size"], "alpha": value["length_penalty"]}
    if args.decoding == "sample":
        try:
            sampling = Sampling(temperature=value["temperature"], top_k=value["top_k"],
                                top_p=value["top_p"])
        except ValueError as error:
            raise ConfigError(f"sampling: {error}") from error
        return {"sampling": sampling, "rng": jax.random.PRNGKey(value["seed"])}
    return {}


def predict(run, args, *, stdin=None, out=print) -> list[str]:
    """The continuation of every prompt (printed to `out` as they come), in order."""
    prompts = read_prompts(args, stdin)
    settings = _settings(args)
    if run.tokenizer is None:
        raise ConfigError(f"{run.workdir} holds no vocabulary/ (a run keeps the one it trained "
                          "with there): restore it from a copy of the workdir")
    tok, model = run.tokenizer, _model(run)
    encoded = [[tok.eos_id, *tok.encode(p)] for p in prompts]
    width = max(map(len, encoded))
    cfg = model.config
    if cfg.posemb == "learned" and width + args.max_new_tokens - 1 > cfg.max_length:
        raise ConfigError(f"the longest prompt ({width} tokens with the leading EOS) and "
                          f"--max_new_tokens={args.max_new_tokens} need "
                          f"{width + args.max_new_tokens - 1} positions; this model's learned "
                          f"table has {cfg.max_length}: shorten either")
    devices = np.array(jax.local_devices())
    batch = -(-args.batch_size // len(devices)) * len(devices)
    mesh = Mesh(devices, ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    params = jax.device_put(run.params, NamedSharding(mesh, PartitionSpec()))

    @jax.jit
    def step(params, tokens, lengths, rng):
        extra = dict(settings, rng=rng) if "rng" in settings else settings
        return generate(model, params, tokens, lengths, max_new_tokens=args.max_new_tokens,
                        eos_id=tok.eos_id, pad_id=tok.pad_id, **extra)[0]

    rng = settings.get("rng", jax.random.PRNGKey(0))
    outputs = []
    for start in range(0, len(encoded), batch):
        chunk = encoded[start: start + batch]
        filled = chunk + [chunk[-1]] * (batch - len(chunk))  # static shapes: repeat the last
        tokens = np.full((batch, width), tok.pad_id, np.int32)
        for i, ids in enumerate(filled):
            tokens[i, :len(ids)] = ids
        lengths = np.array([len(ids) for ids in filled], np.int32)
        rng, key = jax.random.split(rng)
        new = np.asarray(step(params, jax.device_put(tokens, rows),
                              jax.device_put(lengths, rows), key))
        for i, prompt in enumerate(prompts[start: start + batch]):
            ids = new[i].tolist()
            ids = ids[:ids.index(tok.eos_id)] if tok.eos_id in ids else ids
            text = tok.decode(ids)
            outputs.append(text)
            out(f"{prompt}{text}")
    return outputs

"""python -m benchmarks.marian_decode --size opus --batches 1 32 --beam 4 --json FILE

Times beam-search translation by our encoder-decoder (``models.decode.predict``) side by side
with Hugging Face transformers' ``FlaxMarianMTModel.generate`` in the same process, on the same
weights and the same sentences, and prints sentences/s and generated tokens/s per batch size:

  python -m benchmarks.marian_decode --size opus --batches 1 32 --beam 4
  python -m benchmarks.marian_decode --size tiny --batches 1 2 --max_new_tokens 6 --repeats 1

The model: ``--size opus`` is opus-mt-en-de's configuration (58,101 tokens, 6 + 6 layers of
width 512, 8 heads, feed-forward 2,048, SiLU, the OPUS-MT models' ``MarianConfig``); ``tiny`` a
seconds-long one for tests. Its weights are ours, initialised at random, written by
``models.hf_marian`` as a Hugging Face folder and read by ``FlaxMarianMTModel.from_pretrained``:
both libraries run the same numbers. The sentences are random words (neither padding nor EOS) of
8 to 40 tokens ending with EOS, the first B of one fixed list for batch B, padded to the
longest. Random weights rarely choose EOS, so every hypothesis runs ``--max_new_tokens`` steps
in both libraries (the work is the same; the forced EOS of Marian's config ends them).

Rows per batch size:
  ours           ``predict(search='t2t', penalty='power', force_eos=True)``: Hugging Face's
                 search (alive and finished hypotheses apart, ``length ** alpha``), so its
                 translations must be the peer's: the table says for how many sentences they are
  ours, pooled   the project's default search (``models.beam_search``: finished hypotheses keep
                 their beams, the GNMT penalty with alpha 0.6): another search, shown for scale
  transformers   ``generate(num_beams=B, length_penalty=--length_penalty, max_length=1 +
                 --max_new_tokens, early_stopping=False)``
Each is one ``jax.jit`` of the whole translation (encoder and search loop), its weights an
argument (not constants folded into the program), compiled first (time reported apart) and run
once; then ``--repeats`` rounds run every contender once per batch size in turn, the order
reversed every other round, and the table gives each one's median. Ratios: the peer's median
time over ours (above 1: ours is faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.outputs import benchmark_record, run_command
from models import hf_marian
from models.decode import predict
from models.transformer import Transformer

# MarianConfig fields: opus-mt-en-de's, and a tiny one for tests.
SIZES = {
    "opus": dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                 encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                 decoder_ffn_dim=2048, max_position_embeddings=512),
    "tiny": dict(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                 decoder_ffn_dim=64, max_position_embeddings=128),
}
OPUS_CHOICES = dict(activation_function="swish", scale_embedding=True, eos_token_id=0,
                    forced_eos_token_id=0, share_encoder_decoder_embeddings=True,
                    tie_word_embeddings=True, dropout=0.0)
SOURCE_LENGTHS = (8, 40)   # tokens per sentence, EOS included (drawn uniformly)
OURS, POOLED, PEER = "ours", "ours, pooled search (GNMT 0.6)", "transformers"


@dataclasses.dataclass
class Contender:
    """One compiled translation of one batch."""

    label: str
    batch: int
    run_fn: Callable[[], Any]     # runs the compiled function, returns the tokens (host)
    compile_seconds: float
    tokens: np.ndarray            # its translation, in Marian's ids, without the start token
    times: list = dataclasses.field(default_factory=list)

    def run(self) -> float:
        start = time.perf_counter()
        self.run_fn()
        return time.perf_counter() - start


def marian_config(size: str):
    from benchmarks.peers import import_transformers

    vocab = SIZES[size]["vocab_size"]
    return import_transformers().MarianConfig(**SIZES[size], **OPUS_CHOICES,
                                              pad_token_id=vocab - 1,
                                              decoder_start_token_id=vocab - 1)


def sentences(config, count: int, seed: int) -> np.ndarray:
    """``count`` sentences in Marian's ids, [count, longest], padded (module docstring)."""
    rng = np.random.default_rng(seed)
    words = np.array([i for i in range(config.vocab_size)
                      if i not in (config.pad_token_id, config.eos_token_id)])
    lengths = rng.integers(SOURCE_LENGTHS[0], SOURCE_LENGTHS[1] + 1, count)
    out = np.full((count, lengths.max()), config.pad_token_id, np.int32)
    for row, length in enumerate(lengths):
        out[row, :length - 1] = rng.choice(words, length - 1)
        out[row, length - 1] = config.eos_token_id
    return out


def build(args, folder: Path):
    """(our cfg, our params, ids, HF model with our weights, its params)."""
    from benchmarks.peers import import_transformers

    cfg, ids = hf_marian.config_from_hf(marian_config(args.size).to_dict())
    model = Transformer(cfg)
    dummy = jnp.ones((1, 4), jnp.int32)
    params = jax.jit(lambda rng: model.init(rng, dummy, dummy)["params"])(
        jax.random.PRNGKey(args.seed))
    params = jax.tree.map(np.asarray, jax.tree.map(
        lambda x: x.unbox() if hasattr(x, "unbox") else x, params,
        is_leaf=lambda x: hasattr(x, "unbox")))
    hf_marian.save_hf_checkpoint(folder, cfg, params, ids)
    hf = import_transformers().FlaxMarianMTModel.from_pretrained(folder)
    return cfg, params, ids, hf, hf.params


def _compile(label, batch, fn, *call_args, to_marian=lambda t: t) -> Contender:
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*call_args).compile()
    seconds = time.perf_counter() - start
    run_fn = lambda: jax.device_get(compiled(*call_args))  # noqa: E731
    tokens = to_marian(np.asarray(run_fn()))    # the first run: allocation, warm caches
    return Contender(label, batch, run_fn, seconds, tokens)


def build_contenders(args, cfg, params, ids, hf, hf_params) -> list[Contender]:
    config = hf.config
    params, hf_params = jax.device_put(params), jax.device_put(hf_params)  # not per call
    pool = sentences(config, max(args.batches), args.seed)
    model = Transformer(cfg)
    common = dict(beam_size=args.beam, max_decode_len=args.max_new_tokens, eos_id=ids.eos_id,
                  bos_id=ids.start_id)
    contenders = []
    for batch in args.batches:
        source = pool[:batch]
        source = source[:, :(source != config.pad_token_id).sum(axis=1).max()]
        ours_source = jnp.asarray(ids.ours(source))
        theirs = jnp.asarray(source)
        mask = jnp.asarray((source != config.pad_token_id).astype(np.int32))

        def ours(p, x):
            return predict(model, p, x, alpha=args.length_penalty, search="t2t",
                           penalty="power", force_eos=True, **common)[0]

        def pooled(p, x):
            return predict(model, p, x, alpha=0.6, **common)[0]

        def peer(p, x, m):
            return hf.generate(x, attention_mask=m, params=p, num_beams=args.beam,
                               max_length=args.max_new_tokens + 1,
                               length_penalty=args.length_penalty,
                               early_stopping=False).sequences[:, 1:]

        contenders += [
            _compile(OURS, batch, ours, params, ours_source, to_marian=ids.theirs),
            _compile(POOLED, batch, pooled, params, ours_source, to_marian=ids.theirs),
            _compile(f"{PEER} {_transformers_version()}", batch, peer, hf_params, theirs, mask)]
    return contenders


def _transformers_version() -> str:
    from benchmarks.peers import import_transformers
    return import_transformers().__version__


def time_rounds(contenders: list[Contender], repeats: int) -> None:
    """``repeats`` rounds, each running every contender once, the order reversed every other
    round (a shared machine's drift then hits all alike)."""
    for round_index in range(repeats):
        for contender in (contenders if round_index % 2 == 0 else contenders[::-1]):
            contender.times.append(contender.run())


def make_report(args, contenders: list[Contender], num_params: int, pad_id: int) -> dict:
    """Rows (median time, throughput, agreement with the peer) and the peer/ours ratios."""
    peers = {c.batch: c for c in contenders if c.label.startswith(PEER)}
    rows, ratios = [], {}
    for c in contenders:
        seconds = statistics.median(c.times)
        generated = int((c.tokens != pad_id).sum())
        same = float(np.mean([np.array_equal(a, b) for a, b in zip(c.tokens,
                                                                    peers[c.batch].tokens)]))
        rows.append({"label": c.label, "batch": c.batch, "compile_s": c.compile_seconds,
                     "batch_s": seconds, "batch_s_rounds": c.times,
                     "sentences_per_s": c.batch / seconds, "tokens_per_s": generated / seconds,
                     "generated_tokens": generated, "same_as_peer": same})
    for batch, peer in peers.items():
        ours = next(r for r in rows if r["label"] == OURS and r["batch"] == batch)
        ratios[f"batch {batch} (peer time / ours)"] = statistics.median(peer.times) / ours[
            "batch_s"]
    device = jax.devices()[0]
    return {"model": f"Marian {args.size}", "size": args.size, "params": num_params,
            "beam": args.beam, "batches": list(args.batches),
            "max_new_tokens": args.max_new_tokens, "length_penalty": args.length_penalty,
            "device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
            "repeats": args.repeats, "rows": rows, "ratios": ratios}


def markdown(report: dict) -> str:
    head = (f"**{report['model']}** ({report['params']:,} parameters), beam {report['beam']}, "
            f"{report['max_new_tokens']} new tokens a sentence, length penalty "
            f"{report['length_penalty']}; {report['device']}; median of {report['repeats']} "
            "rounds")
    lines = [head, "", "| batch | implementation | compile s | ms / batch | sentences/s | "
             "tokens/s | same output as the peer |", "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        same = "-" if r["label"] == POOLED else f"{r['same_as_peer']:.0%}"
        lines.append(f"| {r['batch']} | {r['label']} | {r['compile_s']:.1f} | "
                     f"{r['batch_s'] * 1e3:.1f} | {r['sentences_per_s']:.2f} | "
                     f"{r['tokens_per_s']:.0f} | {same} |")
    lines.append("")
    lines.extend(f"- {name}: **{value:.2f}x**" for name, value in report["ratios"].items())
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.marian_decode", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=SIZES, default="opus")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32],
                        help="sentences per call, one set of rows each")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=48)
    parser.add_argument("--length_penalty", type=float, default=1.0,
                        help="alpha of length ** alpha (Hugging Face's default 1.0)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (alternating order)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="",
                        help="also write the run record (train/run_record.py) as JSON here")
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    args = parser.parse_args(argv)
    for name in ("beam", "max_new_tokens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.beam < 2:
        parser.error("--beam must be >= 2: this times beam search (Hugging Face's t2t-style "
                     "search, forced EOS and all, has no greedy counterpart here)")
    if min(args.batches) < 1:
        parser.error("--batches must be >= 1")
    if args.length_penalty < 0:
        parser.error("--length_penalty must be >= 0")
    if args.max_new_tokens + 1 > SIZES[args.size]["max_position_embeddings"]:
        parser.error(f"--max_new_tokens {args.max_new_tokens} does not fit the position table "
                     f"({SIZES[args.size]['max_position_embeddings']} rows)")
    return args


def run(args) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        cfg, params, ids, hf, hf_params = build(args, Path(folder) / "marian")
    contenders = build_contenders(args, cfg, params, ids, hf, hf_params)
    time_rounds(contenders, args.repeats)
    num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    return make_report(args, contenders, num_params, hf.config.pad_token_id)


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py): the report as its metrics, with the table."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak_source="not measured (a decoding benchmark)")


def main(argv=None) -> dict:
    """`python -m benchmarks.marian_decode`; `--json FILE` writes the record that
    `python -m train.records save FILE bench_marian_decode` commits."""
    return run_command("benchmarks.marian_decode", argv, parse_args=parse_args, run=run,
                       table=markdown, record=record)


if __name__ == "__main__":
    main(sys.argv[1:])

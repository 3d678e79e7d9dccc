"""python -m benchmarks.lm_decode [--size small] [--json FILE]

Decoding speed of our decoder-only LM (models/lm_decode.py `generate`: a prefill call, then one
cached step per token) side by side with Hugging Face transformers'
`FlaxGPT2LMHeadModel.generate` on the same weights (ours exported with models/hf_gpt2.py and
read back by `from_pretrained`) and the same prompts, in one process:

  decodings   greedy, and sampling from the full distribution (temperature 1, no top-k or
              top-p: both libraries draw from every token)
  batches     1 and 8 (--batches) prompts of --prompt_length random tokens, --new_tokens new
              tokens each (no stop token: every row generates them all, in both libraries)

Both are `jax.jit`-compiled once (the compile time, lowering and compiling without a call, is
reported apart), called once untimed, then timed over --repeats rounds, the two
libraries in turn and the order reversed every other round (a shared machine's drift hits both);
the table shows each one's median time per `generate` call and new tokens per second (the prompt
is read inside the call, as users call it), and the ratio of the peer's time to ours.

The bandwidth bound. Generating one token for one prompt reads every weight once (the tied
embedding matrix once more for the logits is not counted: it is the same memory), so batch-1
greedy decoding can go no faster than memory bandwidth / bytes of weights. The bandwidth is
measured in the same run: the best of several sums over a --bandwidth_mb float32 array, each
byte read once, as decoding reads its weights and writes next to nothing. (An earlier version
timed `x + 1`, whose output is fresh memory on every pass: on a CPU the page faults of that
first touch made it read a third of the true rate, and ours seemed to beat the bound.) The
table gives batch-1 greedy tokens/s as a fraction of that bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.outputs import benchmark_record, run_command
from benchmarks.peers import import_transformers
from models.decoder_lm import DecoderLM, DecoderLMConfig
from models.lm_decode import generate
from models.sampling import Sampling

DECODINGS = ("greedy", "sample")
SIZES = ("tiny", "small", "medium")   # tiny: the smoke test's


def model_config(size: str) -> DecoderLMConfig:
    """GPT-2 `small`/`medium` (models/sizes.py), or a tiny model for tests, without dropout."""
    if size == "tiny":
        return DecoderLMConfig(vocab_size=256, num_layers=2, d_model=64, d_ff=256, num_heads=4,
                               max_length=128, dropout_rate=0.0, attention_dropout_rate=0.0)
    return DecoderLMConfig.from_size(size, dropout_rate=0.0, attention_dropout_rate=0.0)


def measure_bandwidth(megabytes: int, repeats: int = 5) -> float:
    """Best observed bytes/s of reading a float32 array of `megabytes` MB once (its sum)."""
    x = jnp.ones((megabytes * 2**20 // 4,), jnp.float32)
    step = jax.jit(jnp.sum)
    step(x).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step(x).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return x.nbytes / best


@dataclasses.dataclass
class Contender:
    label: str            # 'ours' | 'transformers'
    decoding: str
    batch: int
    run: object           # () -> tokens [batch, new_tokens], blocking
    compile_s: float = 0.0  # lowering and compiling `generate`, no call
    times: list = dataclasses.field(default_factory=list)
    first: object = None  # the tokens of the first (untimed) call


def _ours(model, params, prompts, new_tokens: int, decoding: str):
    sampling = Sampling(temperature=1.0) if decoding == "sample" else None
    stop = model.config.vocab_size  # an id no token has: every row runs to new_tokens

    @jax.jit
    def run(params, prompts, key):
        return generate(model, params, prompts, max_new_tokens=new_tokens, eos_id=stop,
                        suppress_pad=False, sampling=sampling,
                        rng=key if sampling else None)[0]
    return _compiled(run, params, prompts, new_from=0)


def _compiled(run, params, prompts, *, new_from: int):
    """(() -> the new tokens: the call's output from column `new_from` on, blocking; the
    seconds that lowering and compiling `run` took, without a call)."""
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = run.lower(params, prompts, key).compile()
    seconds = time.perf_counter() - start
    return lambda: np.asarray(compiled(params, prompts, key))[:, new_from:], seconds


def _theirs(hf_model, prompts, new_tokens: int, decoding: str):
    sample = decoding == "sample"

    settings = dict(do_sample=True, top_k=0, top_p=1.0, temperature=1.0) if sample else {}

    @jax.jit
    def run(params, prompts, key):
        return hf_model.generate(prompts, params=params, prng_key=key, max_new_tokens=new_tokens,
                                 pad_token_id=0, eos_token_id=hf_model.config.vocab_size,
                                 **settings).sequences  # as ours: an id no token has
    return _compiled(run, hf_model.params, prompts, new_from=prompts.shape[1])


def build(args) -> tuple[list[Contender], int, dict]:
    """Every contender compiled (and run once); the bytes of the weights; for each batch size,
    whether the two libraries' greedy tokens are the same (same weights, same prompts)."""
    from models.hf_gpt2 import save_hf_checkpoint

    transformers = import_transformers()

    cfg = model_config(args.size)
    model = DecoderLM(cfg)
    dummy = jnp.zeros((1, args.prompt_length), jnp.int32)
    params = jax.jit(lambda key: model.init(key, dummy)["params"])(jax.random.PRNGKey(args.seed))
    weight_bytes = sum(int(x.nbytes) for x in jax.tree.leaves(params))
    with tempfile.TemporaryDirectory() as folder:
        # random weights, no vocabulary: id 0 is named its EOS (both runs stop at no id)
        save_hf_checkpoint(Path(folder) / "gpt2", cfg, params, eos_id=0)
        hf_model = transformers.FlaxGPT2LMHeadModel.from_pretrained(Path(folder) / "gpt2")
    rng = np.random.default_rng(args.seed)
    contenders, same = [], {}
    for batch in args.batches:
        prompts = jnp.asarray(rng.integers(1, cfg.vocab_size, (batch, args.prompt_length)),
                              jnp.int32)
        for decoding in DECODINGS:
            for label, (run, compile_s) in (
                    ("ours", _ours(model, params, prompts, args.new_tokens, decoding)),
                    ("transformers", _theirs(hf_model, prompts, args.new_tokens, decoding))):
                out = run()  # the first call: allocation, warm caches (not timed)
                contender = Contender(label, decoding, batch, run, compile_s)
                if out.shape != (batch, args.new_tokens):
                    raise RuntimeError(f"{label} {decoding} gave {out.shape} tokens, expected "
                                       f"{(batch, args.new_tokens)}")
                contender.first = out
                contenders.append(contender)
            if decoding == "greedy":
                same[batch] = bool(np.array_equal(contenders[-1].first, contenders[-2].first))
    return contenders, weight_bytes, same


def time_rounds(contenders: list[Contender], repeats: int) -> None:
    for round_index in range(repeats):
        order = contenders if round_index % 2 == 0 else contenders[::-1]
        for c in order:
            start = time.perf_counter()
            c.run()
            c.times.append(time.perf_counter() - start)


def make_report(args, contenders, weight_bytes: int, bandwidth: float, same: dict) -> dict:
    rows = []
    for c in contenders:
        seconds = statistics.median(c.times)
        rows.append({"label": c.label, "decoding": c.decoding, "batch": c.batch,
                     "compile_s": c.compile_s, "generate_s": seconds, "times": c.times,
                     "tokens_per_s": c.batch * args.new_tokens / seconds})
    by = {(r["label"], r["decoding"], r["batch"]): r for r in rows}
    ratios = {f"{d}, batch {b} (peer time / ours)":
              by[("transformers", d, b)]["generate_s"] / by[("ours", d, b)]["generate_s"]
              for d in DECODINGS for b in args.batches}
    bound = bandwidth / weight_bytes
    # The bound is one prompt's: a step reads the weights once for all the rows of a batch.
    fraction = {label: by[(label, "greedy", 1)]["tokens_per_s"] / bound
                for label in ("ours", "transformers")} if 1 in args.batches else {}
    return {"same_greedy_tokens": {str(b): v for b, v in same.items()},
            "size": args.size, "prompt_length": args.prompt_length,
            "new_tokens": args.new_tokens, "rows": rows, "ratios": ratios,
            "peer": f"transformers {import_transformers().__version__}",  # pinned: peers.py
            "weight_bytes": weight_bytes, "bandwidth_bytes_per_s": bandwidth,
            "bound_tokens_per_s": bound, "bound_batch": 1, "bound_fraction": fraction,
            "device": jax.devices()[0].device_kind, "backend": jax.default_backend()}


def markdown(report: dict) -> str:
    lines = [f"**GPT-2 {report['size']} decoding**, prompts of {report['prompt_length']} tokens, "
             f"{report['new_tokens']} new tokens, {report['backend']} ({report['device']}); "
             f"memory bandwidth {report['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s measured here, "
             f"weights {report['weight_bytes'] / 1e6:.1f} MB: at most "
             f"{report['bound_tokens_per_s']:.1f} tokens/s at batch 1; peer "
             f"{report.get('peer', 'transformers')}",
             "", "| decoding | batch | library | generate (s) | new tokens/s | compile (s) |",
             "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['decoding']} | {r['batch']} | {r['label']} | {r['generate_s']:.3f} "
                     f"| {r['tokens_per_s']:.1f} | {r['compile_s']:.1f} |")
    lines.append("")
    lines += [f"- {name}: {value:.2f}x" for name, value in report["ratios"].items()]
    lines += [f"- greedy, {label}: {100 * value:.1f}% of the bandwidth bound (tokens/s at batch "
              "1)" for label, value in report["bound_fraction"].items()]
    if not report["bound_fraction"]:
        lines.append("- batch 1 not run (--batches): no fraction of the bandwidth bound")
    lines += [f"- greedy tokens of both libraries equal at batch {b}: {'yes' if v else 'NO'}"
              for b, v in report["same_greedy_tokens"].items()]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lm_decode",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--prompt_length", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bandwidth_mb", type=int, default=512,
                        help="size of the array the bandwidth is measured on")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the run record (train/run_record.py) here")
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    args = parser.parse_args(argv)
    try:
        args.batches = tuple(int(b) for b in args.batches.split(","))
    except ValueError:
        parser.error(f"--batches {args.batches!r}: comma-separated whole numbers, e.g. 1,8")
    if not args.batches or min(args.batches) < 1:
        parser.error("--batches must name sizes >= 1")
    for key in ("prompt_length", "new_tokens", "repeats", "bandwidth_mb"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be >= 1")
    return args


def run(args) -> dict:
    """Both libraries' compiled generation timed in alternating rounds, the bandwidth measured
    before and after (the larger kept), and the report."""
    contenders, weight_bytes, same = build(args)
    bandwidth = measure_bandwidth(args.bandwidth_mb)
    time_rounds(contenders, args.repeats)
    bandwidth = max(bandwidth, measure_bandwidth(args.bandwidth_mb))  # before and after
    return make_report(args, contenders, weight_bytes, bandwidth, same)


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py): the report as its metrics, with the table."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak_source="none (decoding is bandwidth-bound: see bound_fraction)")


def main(argv=None) -> dict:
    """`python -m benchmarks.lm_decode`; `--json FILE` writes the record that
    `python -m train.records save FILE bench_lm_decode` commits."""
    return run_command("benchmarks.lm_decode", argv, parse_args=parse_args, run=run,
                       table=markdown, record=record)


if __name__ == "__main__":
    main(sys.argv[1:])

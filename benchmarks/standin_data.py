"""Stand-ins for the paper-scale recipes' datasets, written as real TFDS datasets, for timing the
recipes' input pipelines (benchmarks/input_pipeline.py) where the data cannot be downloaded.

TFDS's mock data (tests/tfds_mock.py) hands the pipelines examples already decoded, with
random-letter strings: right for testing what a pipeline does, useless for timing it, since a
host's work is decoding JPEGs and splitting and tokenizing prose. Each stand-in here is written
to array_record files by a subclass of TFDS's own catalog builder (same name, version, builder
config and features), so `tfds.data_source(name, data_dir=...)` reads it exactly as it reads the
real prepared dataset: the records deserialized and the images decoded by TFDS, as on a pod.

  imagenet2012            JPEGs at ImageNet's commonest sizes (500 x 375, 500 x 333, either way
                          up), of noise with the 1/f amplitude spectrum of natural images
                          (luminance and two weaker colour channels), encoded at the one JPEG
                          quality that makes their mean size ImageNet's: its training archive's
                          138 GB over 1,281,167 images, about 108 KB. Decoding cost follows the
                          pixels and the compressed bytes, both matched; labels cycle over 1000.
  wikipedia/20230601.en   articles of real English prose: the documents of the `english_lm`
                          training split (Austen, Brown, SOTU, the Bible) cut at paragraph ends
                          into articles of at least ARTICLE_CHARS characters, each under a title
                          line, paragraphs separated by a blank line, with a heading line before
                          every third paragraph, as TFDS's Wikipedia text has them (headings are
                          not sentences: the pipeline drops them).
  wmt14_translate/de-en   sentence pairs of real prose: the `bible_en_es` training verses, the
                          English in `en` and the Spanish standing in for `de`.

The prose stand-ins need `python -m data.fetch english_lm bible_en_es`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

IMAGENET = "imagenet2012"
WIKIPEDIA = "wikipedia/20230601.en"
WMT14 = "wmt14_translate/de-en"
IMAGE_SHAPES = ((375, 500), (333, 500), (500, 375), (500, 333))  # (height, width)
IMAGENET_MEAN_BYTES = 138e9 / 1_281_167   # ILSVRC2012_img_train.tar over its images
IMAGENET_CLASSES = 1000
ARTICLE_CHARS = 3000
HEADING_EVERY = 3                          # paragraphs per section


def natural_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """uint8 [height, width, 3]: noise whose amplitude spectrum falls as 1/f (module
    docstring), luminance plus two colour-difference channels of a third its strength."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.hypot(fy, fx)
    f[0, 0] = 1.0
    channels = []
    for strength in (1.0, 0.35, 0.35):
        spectrum = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f
        x = np.fft.irfft2(spectrum, s=(height, width))
        channels.append(strength * (x - x.mean()) / x.std())
    lum, a, b = channels
    rgb = np.stack([lum + a, lum - 0.5 * a + b, lum - 0.5 * a - b], axis=-1)
    return np.clip(128 + 50 * rgb, 0, 255).astype(np.uint8)


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def jpeg_quality(images: list[np.ndarray], mean_bytes: float) -> int:
    """The JPEG quality (1-95) whose encodings of `images` have the mean size nearest
    `mean_bytes` (sizes grow with quality, so a bisection)."""
    def mean_size(q: int) -> float:
        return float(np.mean([len(encode_jpeg(x, q)) for x in images]))

    lo, hi = 1, 95
    while lo < hi:
        mid = (lo + hi) // 2
        if mean_size(mid) < mean_bytes:
            lo = mid + 1
        else:
            hi = mid
    return min((max(lo - 1, 1), lo), key=lambda q: abs(mean_size(q) - mean_bytes))


def imagenet_examples(count: int, seed: int) -> tuple[list[dict], dict]:
    """`count` imagenet2012 examples (module docstring) and what they are: {'quality',
    'mean_bytes', 'mean_pixels'}."""
    rng = np.random.default_rng(seed)
    shapes = [IMAGE_SHAPES[i % len(IMAGE_SHAPES)] for i in range(count)]
    images = [natural_image(rng, h, w) for h, w in shapes]
    quality = jpeg_quality(images[:8], IMAGENET_MEAN_BYTES)
    encoded = [encode_jpeg(x, quality) for x in images]
    examples = [{"image": data, "label": i % IMAGENET_CLASSES,
                 "file_name": f"standin_{i:08d}.JPEG"} for i, data in enumerate(encoded)]
    return examples, {"quality": quality, "mean_bytes": float(np.mean([len(d) for d in encoded])),
                      "mean_pixels": float(np.mean([h * w for h, w in shapes]))}


def articles(documents: Iterable[tuple[str, str]], min_chars: int = ARTICLE_CHARS
             ) -> Iterator[dict]:
    """{'title', 'text'} articles cut from (id, running text) documents at paragraph ends
    (module docstring); a document's remainder shorter than `min_chars` ends its last article."""
    for doc_id, text in documents:
        paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
        part, current = 0, []
        for i, paragraph in enumerate(paragraphs):
            if current and len(current) % (HEADING_EVERY + 1) == HEADING_EVERY:
                current.append(f"Section {i // HEADING_EVERY}")
            current.append(paragraph)
            rest = sum(len(p) for p in paragraphs[i + 1:])
            if sum(len(p) for p in current) >= min_chars and rest >= min_chars:
                yield {"title": f"{doc_id} ({part})", "text": "\n\n".join(current)}
                part, current = part + 1, []
        if current:
            yield {"title": f"{doc_id} ({part})", "text": "\n\n".join(current)}


def wikipedia_examples() -> list[dict]:
    from data.builders.examples import as_text
    from data.builders.sources import get_data_source

    source = get_data_source("english_lm", "train")
    documents = ((as_text(source[i]["doc_id"]), as_text(source[i]["text"]))
                 for i in range(len(source)))
    return list(articles(documents))


def wmt14_examples(split: str) -> list[dict]:
    from data.builders.examples import as_text
    from data.builders.sources import get_data_source

    source = get_data_source("bible_en_es", split)
    return [{"en": as_text(source[i]["en"]), "de": as_text(source[i]["es"])}
            for i in range(len(source))]


def write(name: str, splits: dict[str, Callable[[], list[dict]]], data_dir: Path):
    """Writes `splits` ({split: examples}) as TFDS dataset `name` ('name/config') under
    `data_dir` through a subclass of the catalog's builder; returns the builder."""
    import tensorflow_datasets as tfds

    from data.builders.sources import from_catalog

    base, _, config = name.partition("/")
    catalog = from_catalog(lambda: tfds.builder_cls(base))

    class StandIn(catalog, skip_registration=True):
        def _split_generators(self, dl_manager):
            return {split: ((f"{split}_{i}", example) for i, example in enumerate(make()))
                    for split, make in splits.items()}

    StandIn.name = catalog.name
    builder = StandIn(data_dir=str(data_dir), file_format="array_record",
                      **({"config": config} if config else {}))
    builder.download_and_prepare()
    return builder


def write_all(data_dir: Path, *, images: int, seed: int = 0,
              names: Iterable[str] = (IMAGENET, WIKIPEDIA, WMT14)) -> dict:
    """Writes the stand-ins of `names` under `data_dir`; returns what each holds: {name:
    {split: examples, ...}} and, for imagenet2012, its JPEGs' quality, mean bytes and pixels."""
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()
    summary = {}
    for name in names:
        if name == IMAGENET:
            train, about = imagenet_examples(images, seed)
            validation, _ = imagenet_examples(max(images // 8, 1), seed + 1)
            splits = {"train": lambda: train, "validation": lambda: validation}
        elif name == WIKIPEDIA:
            everything = wikipedia_examples()
            splits, about = {"train": lambda: everything}, {}
        elif name == WMT14:
            splits = {split: (lambda split=split: wmt14_examples(split))
                      for split in ("train", "validation", "test")}
            about = {}
        else:
            raise ValueError(f"no stand-in for {name!r}; known: {[IMAGENET, WIKIPEDIA, WMT14]}")
        builder = write(name, splits, data_dir)
        summary[name] = {**{split: int(info.num_examples)
                            for split, info in builder.info.splits.items()}, **about}
    return summary

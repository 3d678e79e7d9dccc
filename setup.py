"""Transformer, BERT and ViT as pure-functional Flax modules, trained with sharded jax.jit.

Install for development: `pip install -c constraints.txt -e '.[test]'` (what `make` does;
it includes Hugging Face transformers, the benchmarks' peer, which `.[bench]` installs alone).
To view runs in TensorBoard: `pip install -c constraints.txt -e '.[tensorboard]'`. To train with
a workdir on Cloud Storage (gs://): `pip install -c constraints.txt -e '.[gcs]'`.
"""

from setuptools import find_packages, setup

setup(
    name="papers-jax",
    version="0.1.0",
    description="Transformer, BERT and ViT in JAX/Flax: papers, ablations, sharded training",
    python_requires=">=3.11",
    packages=find_packages(include=["models", "models.*", "train", "train.*", "configs",
                                    "configs.*", "data", "data.*", "benchmarks",
                                    "benchmarks.*"]),
    install_requires=[
        "jax>=0.10",
        "flax>=0.12",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12",
        "ml-collections>=1.0",
        "tensorflow-datasets>=4.9.10",  # builders write array_record; no TensorFlow needed
        "importlib_resources",           # TFDS imports it for packaged and catalog builders
        "grain>=0.2.18",
        "array-record>=0.8",
        "numpy",
        "scipy",                         # Student's t for the findings' verdicts (train/findings.py)
        "tensorboardX",                  # TensorBoard event files without TensorFlow
        "tqdm",
        "pysword>=0.2.8",                # reads the SWORD Bible modules (bible_en_es)
        "sentencepiece>=0.2",            # shared source/target vocabulary for translation
        "sacrebleu>=2.4",                # BLEU of translations
        "tokenizers>=0.20",              # WordPiece vocabularies for BERT
        "pillow",                        # decodes (TFDS Image) and resizes ImageNet's images
    ],
    extras_require={
        # transformers: the benchmark's peer, so that its tests run too (tests/test_benchmarks.py);
        # gcsfs and a Cloud Storage emulator: runs with a gs:// workdir, offline
        # (tests/test_gcs_workdir.py)
        "test": ["pytest", "pytest-xdist", "portpicker", "nbclient", "nbformat", "ipykernel",
                 "matplotlib", "transformers==4.57.6", "gcsfs", "gcp-storage-emulator"],
        # A workdir on Cloud Storage (--workdir gs://BUCKET/run, train/storage.py): etils.epath
        # reads and writes it through gcsfs (orbax's arrays go through tensorstore, built in)
        "gcs": ["gcsfs"],
        # benchmarks/: the peer, Hugging Face's Flax BERT and ViT (4.57.6 is the last release
        # with Flax models; it needs tokenizers <= 0.23.0 and huggingface-hub < 1.0, which
        # constraints.txt pins for everyone).
        "bench": ["transformers==4.57.6"],
        # TensorBoard itself, to view the event files runs write in WORKDIR/tensorboard
        # (tensorboardX writes them without it): tensorboard --logdir workdirs
        "tensorboard": ["tensorboard"],
    },
)

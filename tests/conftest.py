"""Shared test set-up: CPU only, the XLA settings below, prepared copies of the committed data
fixtures, and the helpers that run Python in subprocesses.

Most of the suite's time is XLA compiling tiny models, not running them, so before jax is first
imported (here, so that every test and every subprocess started from it inherits them):
  - XLA_FLAGS defaults to `--xla_backend_optimization_level=0`: LLVM optimises the generated
    code less, which halves the compile time of a small model's train step. Results agree with
    the default level's to float32 rounding (a tiny BERT's gradients within 3e-8), not bit for
    bit, so every comparison in the suite runs both sides at this level: subprocesses get the
    session's flags through `xla_flags`.
    Benchmarks, `make demo` and training runs keep XLA's default. To test at the default level
    too, set XLA_FLAGS yourself (`XLA_FLAGS= make test`): a set variable is left as it is.
  - a persistent compilation cache for the session (JAX_COMPILATION_CACHE_DIR, default
    .pytest_cache/xla, size-capped), so a program that several tests or subprocesses compile
    alike (the same smoke run resumed, a sweep's seeds) compiles once; the key covers the
    program, the flags, the devices and the jax version, so a stale entry is never used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(REPO / ".pytest_cache" / "xla"))
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2 << 30))  # bytes; LRU beyond it
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")

import pytest  # noqa: E402


def xla_flags(devices: int) -> str:
    """The session's XLA_FLAGS with `devices` forced CPU devices, for a subprocess's environment
    (set before its jax starts). Forced devices are threads of one process: on 2 busy cores a
    collective can wait long for its last thread, and XLA aborts the process when one waits
    over 40 s (seen once, 8 devices beside the other test worker); the limit here is 300 s."""
    return (f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={devices} "
            "--xla_cpu_collective_call_terminate_timeout_seconds=300").strip()


def _prepared_root(tmp_path_factory, folder: str, install, dataset: str) -> Path:
    """A fresh data root with a committed fixture installed by `install(root)` and the TFDS
    dataset `dataset` prepared from it once (PAPERS_JAX_DATA is restored afterwards)."""
    root = tmp_path_factory.mktemp(folder)
    install(root)
    previous = os.environ.get("PAPERS_JAX_DATA")
    os.environ["PAPERS_JAX_DATA"] = str(root)
    try:
        from data import builders
        builders.prepare(dataset)
    finally:
        if previous is None:
            del os.environ["PAPERS_JAX_DATA"]
        else:
            os.environ["PAPERS_JAX_DATA"] = previous
    return root


@pytest.fixture(scope="session")
def fixture_data_root(tmp_path_factory) -> Path:
    """A data root holding the real Fashion-MNIST excerpt (2,000 train / 1,000 test images),
    laid out as `python -m data.fetch fashion_mnist` would leave it, already prepared."""
    from data.testing import install_fashion_mnist_fixture

    return _prepared_root(tmp_path_factory, "data_root", install_fashion_mnist_fixture,
                          "fashion_mnist")


@pytest.fixture
def fashion_mnist_env(fixture_data_root, monkeypatch) -> Path:
    """PAPERS_JAX_DATA pointing at the prepared fixture for the duration of one test."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(fixture_data_root))
    return fixture_data_root


def run_python(args, *, env=None, devices: int | None = None, timeout=600, check=True):
    """Runs `python ARGS` from the repo root in a fresh process (optionally with N CPU devices)."""
    full_env = dict(os.environ, **(env or {}))
    full_env["JAX_PLATFORMS"] = "cpu"
    if devices is not None:
        full_env["XLA_FLAGS"] = xla_flags(devices)
    result = subprocess.run([sys.executable, *args], cwd=REPO, env=full_env, capture_output=True,
                            text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"python {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def run_two_processes(args, *, env=None, timeout=300) -> list[tuple[str, str]]:
    """Runs `python ARGS --process=i/2@127.0.0.1:PORT` from the repo root as two local processes
    of two CPU devices each (gloo collectives, process 0 the coordinator); waits for both to
    succeed and returns each one's (stdout, stderr)."""
    processes = start_two_processes(args, env=env)
    outputs = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=timeout)
        assert process.returncode == 0, stderr[-3000:]
        outputs.append((stdout, stderr))
    return outputs


def start_two_processes(args, *, env=None) -> list[subprocess.Popen]:
    """The two processes of `run_two_processes`, started (stdout and stderr piped, as text)."""
    import portpicker

    port = portpicker.pick_unused_port()
    full_env = dict(os.environ, **(env or {}))
    full_env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2))
    return [subprocess.Popen([sys.executable, *args, f"--process={i}/2@127.0.0.1:{port}"],
                             cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for i in range(2)]


def json_report(stdout: str) -> dict:
    """The last JSON object line a test script printed (gloo's native code prints its own
    lines to stdout too, in any order relative to Python's)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line in the output:\n{stdout[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def brown_data_root(tmp_path_factory) -> Path:
    """A data root holding the real Brown excerpt (ten documents, five genres), laid out as
    `python -m data.fetch brown` would leave it, already prepared (5 train / 5 validation)."""
    from data.testing import install_brown_fixture

    return _prepared_root(tmp_path_factory, "brown_root", install_brown_fixture, "brown")


@pytest.fixture
def brown_env(brown_data_root, monkeypatch) -> Path:
    """PAPERS_JAX_DATA pointing at the prepared Brown fixture for the duration of one test."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(brown_data_root))
    return brown_data_root


@pytest.fixture(scope="session")
def bible_data_root(tmp_path_factory) -> Path:
    """A data root holding the real Bible excerpt (~2,000 en-es verse pairs) as the two SWORD
    modules `python -m data.fetch bible_en_es` would leave, already prepared."""
    from data.testing import install_bible_fixture

    return _prepared_root(tmp_path_factory, "bible_root", install_bible_fixture, "bible_en_es")


@pytest.fixture
def bible_env(bible_data_root, monkeypatch) -> Path:
    """PAPERS_JAX_DATA pointing at the prepared Bible fixture for the duration of one test."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(bible_data_root))
    return bible_data_root


@pytest.fixture(scope="session")
def english_lm_data_root(tmp_path_factory) -> Path:
    """A data root holding the four corpora of english_lm (tests/english_lm_data.py), the
    dataset prepared."""
    from english_lm_data import install_english_lm_fixture

    return _prepared_root(tmp_path_factory, "english_lm_root", install_english_lm_fixture,
                          "english_lm")


@pytest.fixture
def english_lm_env(english_lm_data_root, monkeypatch) -> Path:
    """PAPERS_JAX_DATA pointing at the prepared english_lm fixture for one test."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(english_lm_data_root))
    return english_lm_data_root


@pytest.fixture(scope="session")
def spam_data_root(tmp_path_factory) -> Path:
    """A data root holding the 100 real SpamAssassin emails of tests/fixtures/spam, laid
    out as `python -m data.fetch spam` would leave it, already prepared."""
    import shutil

    def install(root: Path) -> None:
        shutil.copytree(REPO / "tests" / "fixtures" / "spam" / "package",
                        root / "raw" / "spam" / "package")

    return _prepared_root(tmp_path_factory, "spam_root", install, "spam")


@pytest.fixture
def spam_env(spam_data_root, monkeypatch) -> Path:
    """PAPERS_JAX_DATA pointing at the prepared spam fixture for the duration of one test."""
    monkeypatch.setenv("PAPERS_JAX_DATA", str(spam_data_root))
    return spam_data_root

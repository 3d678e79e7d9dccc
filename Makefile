# `make demo` and `make test` each work alone on a fresh clone: they create the virtualenv,
# install the pinned versions (constraints.txt) and fetch what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
BENCH_DIR ?= workdirs/bench
BENCH_ARGS ?= --steps 3 --repeats 5
WORKDIR ?= workdirs/vit_fashion_mnist
# pytest-xdist worker processes (0: all tests in one process); a file's tests stay together
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=

.PHONY: install demo test bench notebooks clean

install: $(STAMP)

$(STAMP): setup.py constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "error: $(PYTHON) is not Python 3.11 or newer, which the pinned jax and numpy" \
		"need; run with PYTHON=python3.11 (or newer), e.g. PYTHON=python3.11 make test" >&2; \
		exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# Fetch Fashion-MNIST (Debian package), train the default ViT, print the test accuracy.
demo: $(STAMP)
	$(BIN)/python -m data.fetch fashion_mnist
	$(BIN)/python -m train --config configs/vit/fashion_mnist.py --workdir $(WORKDIR)

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS) tests

# Execute every notebook of notebooks/ in place, at the settings committed for readers (about
# 7 minutes of a 2-core CPU; Fashion-MNIST and MiniLM are fetched when missing), then commit them.
# tests/test_notebooks.py runs them at tiny settings and checks the committed outputs.
notebooks: $(STAMP)
	$(BIN)/python notebooks/execute.py

# The train step of our BERT-base (seq 128) and ViT-B/16 (224x224) side by side with Hugging
# Face transformers' Flax models (in the `test` extra, alone in the `bench` extra), on whatever
# device jax sees; tables and JSON go to $(BENCH_DIR). See docs/benchmarks.md.
bench: $(STAMP)
	mkdir -p $(BENCH_DIR)
	$(BIN)/python -m benchmarks.train_step --model bert --size base --seq 128 --batch 8 \
		$(BENCH_ARGS) --json $(BENCH_DIR)/bert_base_128.json --markdown $(BENCH_DIR)/bert_base_128.md
	$(BIN)/python -m benchmarks.train_step --model vit --size B/16 --batch 8 \
		$(BENCH_ARGS) --json $(BENCH_DIR)/vit_b16.json --markdown $(BENCH_DIR)/vit_b16.md

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache

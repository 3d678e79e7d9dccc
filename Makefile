# `make demo` and `make test` each work alone on a fresh clone: they create the virtualenv,
# install the pinned versions (constraints.txt) and fetch what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
WORKDIR ?= workdirs/vit_fashion_mnist
PYTEST_ARGS ?=

.PHONY: install demo test clean

install: $(STAMP)

$(STAMP): setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# Fetch Fashion-MNIST (Debian package), train the default ViT, print the test accuracy.
demo: $(STAMP)
	$(BIN)/python -m data.fetch fashion_mnist
	$(BIN)/python -m train --config configs/vit/fashion_mnist.py --workdir $(WORKDIR)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS) tests

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache

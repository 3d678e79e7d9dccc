"""What the rematerialisation tests of ViT, BERT and the Transformer share: the primitives of a
gradient's jaxpr, the residuals a backward pass keeps, and closeness of loss/gradient pairs."""

from __future__ import annotations

import contextlib
import io

import jax
import numpy as np
from jax.ad_checkpoint import print_saved_residuals

REMATS = ("minimal", "full")  # compared against 'none'


def primitive_names(jaxpr) -> set[str]:
    """Every primitive of a (closed) jaxpr, those of nested jaxprs (jit, remat, ...) included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    names |= primitive_names(sub)
    return names


def grad_has_remat(loss, *args) -> bool:
    """Whether the jaxpr of ``jax.grad(loss)`` holds a ``jax.checkpoint`` (primitive 'remat2')."""
    names = primitive_names(jax.make_jaxpr(jax.grad(loss))(*args))
    return any("remat" in name or "checkpoint" in name for name in names)


def num_saved_residuals(loss, *args) -> int:
    """How many arrays the backward pass of ``loss`` keeps from its forward pass."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_saved_residuals(loss, *args)
    return len(printed.getvalue().splitlines())


def assert_same_loss_and_grads(got, expected, tol=1e-6):
    """``got`` and ``expected`` are ``(loss, grads)`` pairs."""
    np.testing.assert_allclose(got[0], expected[0], rtol=tol, atol=tol)
    assert jax.tree.structure(got[1]) == jax.tree.structure(expected[1])
    for g, e in zip(jax.tree.leaves(got[1]), jax.tree.leaves(expected[1])):
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


def assert_same_variables(got, expected):
    """Identical trees (names, logical axis metadata) and identical values."""
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(g, e)

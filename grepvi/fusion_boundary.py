"""Values computed once into memory, not again inside each of their consumers (XLA on CPU).

XLA's CPU backend fuses a cheap elementwise producer into every fusion that reads it, and so
computes it once per consumer. That is right for one ``exp`` but not for a chain: a
standard normal draw is a Threefry hash, a uniform and a 20-term ``erf_inv`` polynomial, and
a G-REP step reads each latent's draw in the transform, the log joint's derivative, the
correction term and the entropy. In the default procedure's window of a three-element
ridge (two normal latents and a gamma) the compiled step held the normal's ``erf_inv`` in 12
fusions and the gamma sampler's proposal normal in 5.

A conditional on a runtime predicate is a fusion boundary (XLA does not fuse across it), and
its result is materialized once. Both branches here return the tree's values (the other
branch adds zero), so the predicate's value never matters; it must be unknown to the
compiler (a constant folds the conditional away) and should not be batched under ``vmap``
(a batched predicate turns the conditional into a select, which fuses again: the values
are still right, the boundary is gone). An ``optimization_barrier`` is removed by the CPU
pipeline and does not help (on the ridge's draws the optimized HLO kept 3,653 of its 3,659
``erf_inv`` lines; the gradient's materialization found the same,
:func:`grepvi.inference.state.materialize_gradient`).

Measured (``benchmarks/fusion_boundary.py``, 2 cores, the default procedure's window, fresh
processes alternated, medians of 3-5): the step 0.71-0.89 times as long on six of eight
textbook models (pumps 0.236 -> 0.166 ms), as long on the other two; compilation 0.81-0.97
times as long on seven (logistic 1.31 -> 1.07 s), 1.05 on rat tumours
(``docs/performance.md``). Other backends get the tree as is (a conditional on a GPU costs a
device-to-host transfer of its predicate).
"""

import math

import jax
import jax.numpy as jnp

__all__ = ["computed_once", "predicate_of", "SMALL_TREE_ELEMENTS"]

# Trees up to this many elements get the boundary where the caller asks for it by size. On
# the Olivetti DEF (1.3 million gamma draws a step) materializing the draws and the
# sampler's proposal normals made the window's step no faster (30.7 -> 33.7 ms, within the
# machine's drift but not better): a large array's memory traffic costs what recomputing
# its polynomial does. The same split as the step programs' compiler options
# (:data:`grepvi.inference.compilation_cache.SMALL_MODEL_ELEMENTS`).
SMALL_TREE_ELEMENTS = 10_000


def num_elements(tree) -> int:
    """Elements of the leaves of ``tree`` (static shapes)."""
    return int(sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree_util.tree_leaves(tree)))


def predicate_of(anchor):
    """A runtime ``True`` the compiler cannot fold: ``anchor``'s first element equals itself
    (false only for a NaN, where :func:`computed_once` gives the same values; a constant
    ``True`` for an anchor without elements)."""
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(anchor) if jnp.size(leaf)]
    if not leaves:
        return jnp.asarray(True)
    first = jnp.ravel(leaves[0])[0]
    return first == first


def computed_once(tree, predicate, max_elements: int | None = None):
    """``tree`` unchanged, computed once into memory before its consumers on CPU.

    ``predicate``: a runtime boolean scalar (:func:`predicate_of`), unbatched where the caller
    is under ``vmap``; ``max_elements``: the boundary only for trees of at most this many
    elements (``None``: any size). Differentiable (the branches are the identity and ``+ 0``).

    A boolean leaf crosses the boundary as a float (``0`` or ``1``) and is compared back:
    where every leaf's two branches are the identity, XLA deletes the conditional, and with
    it the boundary (the step's finiteness verdict was fused into about 30 readers so). An
    integer leaf crosses as it is (no boundary of its own).
    """
    if jax.default_backend() != "cpu" or not jax.tree_util.tree_leaves(tree):
        return tree
    if max_elements is not None and num_elements(tree) > max_elements:
        return tree
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    boolean = [jnp.result_type(leaf) == jnp.bool_ for leaf in leaves]
    carried = [jnp.asarray(leaf, jnp.float32) if b else leaf for leaf, b in zip(leaves, boolean, strict=True)]
    carried = jax.lax.cond(predicate, lambda t: t, lambda t: [_plus_zero(leaf) for leaf in t], carried)
    leaves = [leaf > 0 if b else leaf for leaf, b in zip(carried, boolean, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _plus_zero(leaf):
    return leaf + 0 if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact) else leaf

"""A model's primitives that XLA runs slowly on CPU, evaluated in forms it runs fast.

The default procedure evaluates the model's value and gradient under ``vmap`` over its
draws. Two kinds of primitive then cost far more on CPU than the arithmetic they do, and
:func:`cpu_rewritten` replaces them (the same function, up to rounding):

**Products of small matrices** (``dot_general`` contracting at most ``MAX_CONTRACTION``
elements, each operand of at most ``MAX_OPERAND_ELEMENTS`` before ``vmap``) become a
broadcast multiply and a sum over the contracted axes (:func:`multiply_and_sum`). A
state-space model's filter multiplies 2x2 or 3x3 matrices at every time step; under ``vmap``
each ``@`` is a batched matrix product, a library call whose per-call cost dwarfs its few
multiplies (its gradient adds transposed products of the same kind), where the multiply and
sum is elementwise arithmetic that XLA fuses with its neighbours. Measured (a 50-trip
``scan`` of ``a @ c @ b.T`` under ``vmap`` of value and gradient, square ``n x n``; per trip,
products against multiply and sum): n = 2: 2.8 / 1.5 us at 16 draws, 4.2 / 2.6 at 96; n = 3:
3.8 / 3.0, 16.6 / 7.7; n = 4: 67.6 / 2.3, 355 / 132; n = 6: 69.4 / 6.2, 394 / 251; but n = 8:
31.5 / 70.6, 169 / 398 (the library's product wins from there).

**Cumulative reductions other than sums** (``lax.cumlogsumexp``, ``cumprod``, ``cummax``,
``cummin`` of floats) become a sequential ``lax.scan`` of their binary operation
(:func:`sequential_cumulative`). On CPU JAX lowers them as a windowed reduction of the whole
axis, and differentiates them through ``lax.associative_scan``, a tree of slices and
concatenations that XLA compiles slowly and runs with many small copies; ``cumsum``, linear,
keeps its own lowering (as fast as the scan). Measured (``vmap`` of value and gradient of a
reverse ``cumlogsumexp``, compile s and run ms a step, native against scan): 250 elements, 16
draws: 1.99 / 0.31 against 0.31 / 0.07; 1,000 elements, 64 draws: 3.02 / 2.78 against 0.37
/ 0.67; 10,000, 64 draws: 6.16 / 18.9 against 0.87 / 5.9; ``cumprod`` and ``cummax`` of
1,000 at 64 draws: 1.43 / 0.64 against 0.32 / 0.58, 1.77 / 1.00 against 0.33 / 0.41.

``python benchmarks/cpu_rewrites.py`` measures both kinds against the primitives in one process.
Whole default fits (``docs/performance.md``, seventy-third session): a local-linear-trend
Kalman filter of 120 points 12.4 -> 7.6 s (the same 3,675 iterations); a Cox partial
likelihood of 250 subjects (a reverse ``cumlogsumexp`` over the risk sets) 14.6 -> 4.3 s (the
same 2,875); Plackett-Luce rankings 9.9 -> 6.1 s (the same 3,975).

The rewrite is for CPU: :func:`grepvi.inference.fitting.replayed_target` applies it where
JAX's default backend is the CPU (on a GPU the library's batched products and the parallel
scan are the fast forms). :func:`cpu_rewritten` traces the function once and evaluates its
jaxpr again, equation by equation, with those primitives replaced (inside ``jit``, ``scan``,
``while``, ``cond`` and ``checkpoint`` bodies too, :mod:`grepvi.inference.jaxpr_rewrite`); a
function with none is evaluated as traced.
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

from grepvi.inference.cost import sub_jaxprs
from grepvi.inference.jaxpr_rewrite import evaluator_with, traced_flat

__all__ = ["cpu_rewritten", "multiply_and_sum", "rewrites", "sequential_cumulative"]

MAX_CONTRACTION = 6  # contracted elements of a product rewritten (at 8 the library's wins)
MAX_OPERAND_ELEMENTS = 64  # elements of each operand of a product rewritten, before vmap


def _cumulative_rules() -> dict:
    """``{primitive: (binary operation, identity)}`` of the cumulative reductions rewritten."""
    try:
        from jax._src.lax.control_flow import loops
    except ImportError:  # JAX's internals differ: the reductions are left as they are
        return {}
    rules = {}
    for name, combine, identity in (
        ("cumlogsumexp_p", jnp.logaddexp, -math.inf),
        ("cumprod_p", lax.mul, 1.0),
        ("cummax_p", lax.max, -math.inf),
        ("cummin_p", lax.min, math.inf),
    ):
        primitive = getattr(loops, name, None)
        if primitive is not None:  # JAX's internals differ: that reduction is left as it is
            rules[primitive] = (combine, identity)
    return rules


_CUMULATIVE = _cumulative_rules()


def _is_small_product(eqn) -> bool:
    if eqn.primitive is not lax.dot_general_p:
        return False
    lhs, rhs = (var.aval for var in eqn.invars)
    if not all(jnp.issubdtype(a.dtype, jnp.floating) for a in (lhs, rhs)):
        return False
    (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
    contraction = math.prod(lhs.shape[d] for d in lhs_contracting)
    return (
        contraction <= MAX_CONTRACTION
        and math.prod(lhs.shape) <= MAX_OPERAND_ELEMENTS
        and math.prod(rhs.shape) <= MAX_OPERAND_ELEMENTS
    )


def _is_cumulative(eqn) -> bool:
    return eqn.primitive in _CUMULATIVE and jnp.issubdtype(eqn.invars[0].aval.dtype, jnp.floating)


def _rewritten(eqn) -> bool:
    return _is_small_product(eqn) or _is_cumulative(eqn)


def rewrites(jaxpr) -> int:
    """How many equations of ``jaxpr`` (closed or open; its sub-jaxprs included, each counted
    once however often it runs) :func:`cpu_rewritten` replaces."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    count = 0
    for eqn in jaxpr.eqns:
        count += _rewritten(eqn)
        count += sum(rewrites(sub) for sub in sub_jaxprs(eqn))
    return count


def multiply_and_sum(lhs, rhs, dimension_numbers, preferred_element_type=None, **_):
    """``lax.dot_general(lhs, rhs, dimension_numbers)`` as a broadcast multiply and a sum over
    the contracted axes: the output's axes in ``dot_general``'s order (batch, the left's free
    axes, the right's free axes)."""
    (lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contracting and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contracting and d not in rhs_batch]
    batch, left, right, contracted = len(lhs_batch), len(lhs_free), len(rhs_free), len(lhs_contracting)
    a = jnp.transpose(lhs, [*lhs_batch, *lhs_free, *lhs_contracting])
    b = jnp.transpose(rhs, [*rhs_batch, *rhs_free, *rhs_contracting])
    a = a.reshape(a.shape[: batch + left] + (1,) * right + a.shape[batch + left :])
    b = b.reshape(b.shape[:batch] + (1,) * left + b.shape[batch:])
    product = a * b
    if contracted:
        product = jnp.sum(product, axis=tuple(range(product.ndim - contracted, product.ndim)))
    dtype = preferred_element_type if preferred_element_type is not None else product.dtype
    return product.astype(dtype)


def sequential_cumulative(x, combine: Callable, identity: float, *, axis: int, reverse: bool):
    """The cumulative reduction of ``x`` along ``axis`` by ``combine`` (``lax.cumprod``'s and
    its kin's result, from the end where ``reverse``) as a ``lax.scan`` carrying the running
    value from ``identity``."""
    moved = jnp.moveaxis(x, axis, 0)

    def step(running, element):
        running = combine(running, element)
        return running, running

    start = jnp.full(moved.shape[1:], identity, x.dtype)
    _, out = lax.scan(step, start, moved, reverse=reverse)
    return jnp.moveaxis(out, 0, axis)


def _replaced(eqn, inputs):
    if _is_small_product(eqn):
        return [multiply_and_sum(*inputs, **eqn.params)]
    if _is_cumulative(eqn):
        combine, identity = _CUMULATIVE[eqn.primitive]
        return [sequential_cumulative(inputs[0], combine, identity, **eqn.params)]
    return None


_evaluate = evaluator_with(_replaced, wanted=rewrites)


def cpu_rewritten(function: Callable) -> Callable:
    """``function`` (of arrays, pytrees in and out) traced once and evaluated with its small
    matrix products and cumulative reductions rewritten (module docstring), into the caller's
    trace; where it has none, its own trace is evaluated as it is."""

    def evaluated(*args):
        closed, flat, out_tree = traced_flat(function, args)
        if rewrites(closed) == 0:
            outputs = jex_core.jaxpr_as_fun(closed)(*flat)
        else:
            outputs = _evaluate(closed.jaxpr, closed.consts, *flat)
        return jax.tree_util.tree_unflatten(out_tree, outputs)

    return evaluated

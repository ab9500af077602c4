"""A model's products of small matrices computed elementwise: a multiply and a sum.

A state-space model's filter multiplies 2x2 or 3x3 matrices at every time step, and the
default procedure evaluates the model under ``vmap`` over its draws, so each such ``@``
becomes a ``dot_general`` with a batch dimension of the draws: on CPU, XLA runs it as a
batched matrix product (a library call per step of the loop) whose per-call cost dwarfs the
few multiplies it does, and its gradient adds transposed products of the same kind. As a
broadcast multiply followed by a sum over the contracted axes, the same product is
elementwise arithmetic that XLA fuses with its neighbours.

Measured (2-core CPU; ``vmap`` of value and gradient over the draws, a 50-trip ``scan`` of
``a @ c @ b.T``, square ``n x n`` matrices; ``docs/performance.md``, seventy-third session):
per trip, products against the multiply and sum, n = 2: 2.8 / 1.5 us at 16 draws, 4.2 / 2.6
at 96; n = 3: 3.8 / 3.0, 16.6 / 7.7; n = 4: 67.6 / 2.3, 355 / 132; n = 6: 69.4 / 6.2, 394 /
251; but n = 8: 31.5 / 70.6, 169 / 398 (the library's product wins from there). So the
products rewritten are those contracting at most ``MAX_CONTRACTION`` elements whose operands
each hold at most ``MAX_OPERAND_ELEMENTS`` (before ``vmap``). A local-linear-trend Kalman
filter of 120 points (``benchmarks/stranger_models.py``) fitted with the defaults in 12.4 s
before, 7.6 s after, the same 3,675 iterations.

:func:`elementwise_small_products` traces the function once and evaluates its jaxpr again,
equation by equation, with those products replaced (inside ``jit``, ``scan``, ``while``,
``cond`` and ``checkpoint`` bodies too, :mod:`grepvi.inference.jaxpr_rewrite`); a function
with no such product is returned as it is. The numbers are the same up to the order of a
sum of at most six terms (an ulp).
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

from grepvi.inference.cost import sub_jaxprs
from grepvi.inference.jaxpr_rewrite import traced_flat, transformed_param

__all__ = ["elementwise_small_products", "small_products"]

MAX_CONTRACTION = 6  # contracted elements of a product rewritten (at 8 the library's wins)
MAX_OPERAND_ELEMENTS = 64  # elements of each operand of a product rewritten, before vmap


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


def small_products(jaxpr) -> int:
    """How many products of ``jaxpr`` (closed or open; its sub-jaxprs included, each counted
    once however often it runs) :func:`elementwise_small_products` rewrites."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    count = 0
    for eqn in jaxpr.eqns:
        count += _is_small_product(eqn)
        count += sum(small_products(sub) for sub in sub_jaxprs(eqn))
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


def _evaluate(jaxpr, consts, *args):
    env = {}

    def read(var):
        return var.val if isinstance(var, jex_core.Literal) else env[var]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        inputs = [read(var) for var in eqn.invars]
        if _is_small_product(eqn):
            outputs = [multiply_and_sum(*inputs, **eqn.params)]
        else:
            params = {
                key: transformed_param(value, _evaluate, wanted=small_products)
                for key, value in eqn.params.items()
            }
            with eqn.ctx.manager:
                outputs = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(params))
            if not eqn.primitive.multiple_results:
                outputs = [outputs]
        for var, value in zip(eqn.outvars, outputs, strict=True):
            if not isinstance(var, jex_core.DropVar):
                env[var] = value
    return [read(var) for var in jaxpr.outvars]


def elementwise_small_products(function: Callable) -> Callable:
    """``function`` (of arrays, pytrees in and out) traced once and evaluated with its small
    matrix products as a multiply and a sum (module docstring), into the caller's trace;
    where it has none, its own trace is evaluated as it is."""

    def evaluated(*args):
        closed, flat, out_tree = traced_flat(function, args)
        if small_products(closed) == 0:
            outputs = jex_core.jaxpr_as_fun(closed)(*flat)
        else:
            outputs = _evaluate(closed.jaxpr, closed.consts, *flat)
        return jax.tree_util.tree_unflatten(out_tree, outputs)

    return evaluated

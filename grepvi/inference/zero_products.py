"""A function evaluated with products whose exact zero factor wins: ``0 * x = 0`` for any ``x``.

Reverse-mode autodiff multiplies a cotangent by each local derivative, and where one is an
exact zero and the other infinite IEEE arithmetic gives NaN: the gradient of ``(d / e) ** h``
in ``e`` at a dose ``d = 0`` and ``h < 1`` is ``h (d / e)^(h - 1) * (-d / e^2) = inf * 0``,
though the function is identically 0 in ``e`` there and its derivative is 0. An Emax
dose-response model with doses of 0 (``edge_models.py``) had NaN gradients wherever ``q``
drew a Hill coefficient below 1 (54% of its start's draws), in float64 too.

:func:`zero_absorbing` runs a function's jaxpr again, primitive by primitive, with
``mul(a, b) = 0`` where ``a`` or ``b`` is exactly 0 and ``div(a, b) = 0`` where ``a`` is (``0 /
0``: a zero tangent through ``sqrt`` at 0), into the calling trace (sub-jaxprs of ``jit``,
``scan``, ``while``, ``cond`` and ``checkpoint`` likewise). Where no product has a zero factor
and a non-finite one it gives the same numbers up to rounding (XLA may fuse the selected
products differently: within an ulp, 1e-7 relative in float32 on a NumPyro beta and Student-t
density's gradient, bitwise on simpler ones); where one has, the chain rule's term is taken as 0,
the derivative of a function that is flat along that path (a subgradient at a kink such as
``sqrt(x^2)`` at 0). Used by :mod:`grepvi.inference.widened_gradient` only where a gradient is
still not finite in float64, so no other step changes.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from grepvi.inference.jaxpr_rewrite import evaluator_with, traced_flat

__all__ = ["zero_absorbing"]


def _is_inexact(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _mul(a, b):
    product = lax.mul(a, b)
    if not _is_inexact(product):
        return product
    zero = jnp.logical_or(a == 0, b == 0)
    return jnp.where(zero, jnp.zeros((), product.dtype), product)


def _div(a, b):
    quotient = lax.div(a, b)
    if not _is_inexact(quotient):
        return quotient
    return jnp.where(a == 0, jnp.zeros((), quotient.dtype), quotient)


_RULES = {lax.mul_p: _mul, lax.div_p: _div}


def _replaced(eqn, inputs):
    rule = _RULES.get(eqn.primitive)
    return None if rule is None else [rule(*inputs)]


_evaluate = evaluator_with(_replaced)


def zero_absorbing(function: Callable) -> Callable:
    """``function`` (of arrays, pytrees in and out) traced once and evaluated with ``0 * x = 0``
    and ``0 / x = 0`` (module docstring), into the caller's trace."""

    def evaluated(*args):
        closed, flat, out_tree = traced_flat(function, args)
        return jax.tree_util.tree_unflatten(out_tree, _evaluate(closed.jaxpr, closed.consts, *flat))

    return evaluated

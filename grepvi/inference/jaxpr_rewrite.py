"""An equation's sub-jaxprs traced again through an evaluator of jaxprs.

:mod:`grepvi.inference.zero_products` and :mod:`grepvi.inference.special_batches` each run a
jaxpr again equation by equation, with a rule of their own; an equation that holds jaxprs (a
``jit``'s, a ``scan``'s or ``while``'s body, a ``cond``'s branches, a ``checkpoint``'s open
jaxpr) is bound with those jaxprs traced through the same evaluator, so the rule applies
inside them too.
"""

import functools
from collections.abc import Callable

import jax
from jax.extend import core as jex_core

__all__ = ["transformed_param", "transformed_closed", "traced_flat"]


def transformed_closed(closed, evaluate: Callable):
    """``closed`` traced again through ``evaluate(jaxpr, consts, *args) -> outputs``: the same
    inputs and outputs."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    return jax.make_jaxpr(functools.partial(evaluate, closed.jaxpr, closed.consts))(*avals)


def transformed_param(value, evaluate: Callable, wanted: Callable | None = None):
    """An equation's parameter with each jaxpr in it traced again through ``evaluate``
    (:func:`transformed_closed`); other parameters, and jaxprs for which ``wanted(jaxpr)`` is
    false, as they are."""
    if isinstance(value, jex_core.ClosedJaxpr):
        return transformed_closed(value, evaluate) if wanted is None or wanted(value) else value
    if isinstance(value, jex_core.Jaxpr) and not value.constvars and (wanted is None or wanted(value)):
        closed = transformed_closed(jex_core.ClosedJaxpr(value, ()), evaluate)  # a checkpoint's open jaxpr
        return value if closed.consts else closed.jaxpr  # constants it cannot take: left as it was
    if isinstance(value, tuple) and value and all(isinstance(v, jex_core.ClosedJaxpr) for v in value):
        return tuple(transformed_param(v, evaluate, wanted) for v in value)  # a cond's branches
    return value


def traced_flat(function: Callable, args: tuple):
    """``(closed jaxpr, flat arguments, output treedef)`` of ``function(*args)`` (pytrees of
    arrays in and out): what an evaluator runs again, and how to rebuild its outputs."""
    flat, in_tree = jax.tree_util.tree_flatten(args)
    unflattened = lambda *leaves: function(*in_tree.unflatten(leaves))  # noqa: E731
    closed, out_shape = jax.make_jaxpr(unflattened, return_shape=True)(*flat)
    return closed, flat, jax.tree_util.tree_structure(out_shape)

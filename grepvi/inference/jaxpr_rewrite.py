"""An equation's sub-jaxprs traced again through an evaluator of jaxprs.

:mod:`grepvi.inference.zero_products`, :mod:`grepvi.inference.cpu_rewrites` and
:mod:`grepvi.inference.special_batches` each run a jaxpr again equation by equation, with a
rule of their own; an equation that holds jaxprs (a ``jit``'s, a ``scan``'s or ``while``'s
body, a ``cond``'s branches, a ``checkpoint``'s open jaxpr) is bound with those jaxprs traced
through the same evaluator, so the rule applies inside them too. :func:`evaluator_with` builds
such an evaluator from a rule that replaces single equations.
"""

import functools
from collections.abc import Callable

import jax
from jax.extend import core as jex_core

__all__ = ["evaluator_with", "transformed_param", "transformed_closed", "traced_flat"]


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


def evaluator_with(replace: Callable, wanted: Callable | None = None) -> Callable:
    """An evaluator ``(jaxpr, consts, *args) -> outputs`` that binds each equation of the jaxpr
    into the caller's trace, but where ``replace(eqn, inputs)`` returns the equation's outputs
    (a list) instead of ``None``; sub-jaxprs for which ``wanted`` is true (all, where ``None``)
    are traced again through the same evaluator (:func:`transformed_param`)."""

    def evaluate(jaxpr, consts, *args):
        env = {}

        def read(var):
            return var.val if isinstance(var, jex_core.Literal) else env[var]

        for var, value in zip(jaxpr.constvars, consts, strict=True):
            env[var] = value
        for var, value in zip(jaxpr.invars, args, strict=True):
            env[var] = value
        for eqn in jaxpr.eqns:
            inputs = [read(var) for var in eqn.invars]
            outputs = replace(eqn, inputs)
            if outputs is None:
                params = {k: transformed_param(v, evaluate, wanted) for k, v in eqn.params.items()}
                with eqn.ctx.manager:
                    outputs = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(params))
                if not eqn.primitive.multiple_results:
                    outputs = [outputs]
            for var, value in zip(eqn.outvars, outputs, strict=True):
                if not isinstance(var, jex_core.DropVar):
                    env[var] = value
        return [read(var) for var in jaxpr.outvars]

    return evaluate

"""What a traced program costs: a floating-point operation count of a jaxpr.

The default procedure sizes the first draws per step by what one draw costs
(:func:`grepvi.inference.fitting.draws_per_step`). The count is taken from the jaxpr of the
step that the compiled window replays anyway (:func:`grepvi.inference.state.traced_once`), so
it costs a walk over the equations, not a compilation (XLA's own ``cost_analysis`` needs the
compiled or lowered program: 0.15-0.25 s on the textbook models, a second compilation where
the draws change).

The count follows XLA's ``HloCostAnalysis`` in kind: an elementwise or reducing operation
counts one per element of its output (of its input for a reduction), ``dot_general`` two per
multiply-add, a while loop's body once (its trip count is dynamic: the repeats of a step's
draws), a ``scan`` its body times its length, a ``cond`` its costliest branch.
XLA expands special functions (``lgamma``, ``digamma``) into polynomials that this counts as
one operation: a draw of a 500-row negative-binomial regression is 0.18 MFLOP here and 0.58 by
XLA's count of the lowered program, one of a 2,000 x 20 logistic regression 0.37 and 0.25. It
is a size, not a timing.
"""

import math

import jax
import numpy as np

__all__ = ["jaxpr_flops"]

_FREE = {
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "convert_element_type",
    "slice",
    "dynamic_slice",
    "gather",
    "concatenate",
    "transpose",
    "iota",
    "copy",
    "copy_p",
    "select_n",
    "pad",
    "random_bits",
    "random_seed",
    "random_wrap",
    "random_unwrap",
    "random_fold_in",
    "random_split",
    "threefry2x32",
    "dynamic_update_slice",
    "scatter",
    "stop_gradient",
}
_REDUCE = {
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "argmax",
    "argmin",
    "cumsum",
    "cumlogsumexp",
}


def _size(aval) -> int:
    shape = getattr(aval, "shape", ())
    return int(math.prod(shape)) if shape else 1


def _sub_jaxprs(eqn):
    """The jaxprs an equation runs (a call, a loop's body, a cond's branches)."""
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, jax.extend.core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, jax.extend.core.Jaxpr):
                found.append(item)
    return found


def jaxpr_flops(jaxpr) -> float:
    """The floating-point operations of one run of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inner = _sub_jaxprs(eqn)
        if inner:
            costs = [jaxpr_flops(sub) for sub in inner]
            if name == "cond":
                total += max(costs)
            elif name == "scan":
                total += sum(costs) * int(eqn.params.get("length", 1))
            else:
                total += sum(costs)
            continue
        if name in _FREE:
            continue
        out = sum(_size(var.aval) for var in eqn.outvars)
        if name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = getattr(eqn.invars[0].aval, "shape", ())
            total += 2.0 * out * float(np.prod([lhs[d] for d in contracting])) if contracting else out
        elif name in _REDUCE:
            total += sum(_size(var.aval) for var in eqn.invars)
        else:
            total += out
    return total

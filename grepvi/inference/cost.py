"""What a traced program costs: a floating-point operation count of a jaxpr, and the elements
of chosen primitives (special functions, gathers) in it.

The default procedure sizes the first draws per step by what one draw costs
(:func:`grepvi.inference.fitting.draws_per_step`), and a small model's compiler options by
what its step evaluates (:func:`grepvi.inference.compilation_cache.step_compiler_options`).
The counts are taken from the jaxpr of the step that the compiled window replays anyway
(:func:`grepvi.inference.state.traced_once`), so they cost a walk over the equations, not a
compilation (XLA's own ``cost_analysis`` needs the compiled or lowered program: 0.15-0.25 s
on the textbook models, a second compilation where the draws change).

The count follows XLA's ``HloCostAnalysis`` in kind: an elementwise or reducing operation
counts one per element of its output (of its input for a reduction), ``dot_general`` two per
multiply-add, a while loop's body once (its trip count is dynamic: the repeats of a step's
draws), a ``scan`` its body times its length, a ``cond`` its costliest branch.
XLA expands special functions (``lgamma``, ``digamma``) into polynomials that this counts as
one operation: a draw of a 500-row negative-binomial regression is 0.18 MFLOP here and 0.58 by
XLA's count of the lowered program, one of a 2,000 x 20 logistic regression 0.37 and 0.25. It
is a size, not a timing.

The iterative special functions are the exception (:data:`ITERATIVE_COST`): XLA evaluates the
incomplete gamma and beta functions, ``zeta`` and ``polygamma`` by series or continued
fractions in a loop, at 30 to 250 times an ``exp`` per element. Measured on one CPU core
(seventieth session, 128 x 150 float32 elements, nanoseconds per element): ``exp`` 1.4, ``add``
1.8, ``lgamma`` 9.8, ``digamma`` 14.1, ``igamma`` 92, ``igammac`` 91, ``igamma`` and its
derivative in ``a`` 171, ``random_gamma_grad`` 96, ``polygamma(1, x)`` 75, ``zeta`` 51,
``betainc`` 358. Counted as one operation, a Poisson regression whose 150 capped counts enter
as ``log gammainc(8, rate)`` (``benchmarks/reviewer_models.py``, ``censored_poisson``) took
64-128 draws a step, about 2.5 ms each: 7 s of an 11 s fit where NumPyro's SVI took 3.2 s in all.
"""

import math

import jax
import numpy as np

__all__ = ["jaxpr_flops", "jaxpr_elements", "sub_jaxprs", "SPECIAL_FUNCTIONS", "ITERATIVE_COST"]

# Primitives XLA expands into long polynomial or series code per element (NumPyro's gamma,
# beta, negative-binomial and Student-t log densities and their gradients call them).
SPECIAL_FUNCTIONS = frozenset(
    {
        "lgamma",
        "digamma",
        "polygamma",
        "igamma",
        "igammac",
        "igamma_grad_a",
        "random_gamma_grad",
        "regularized_incomplete_beta",
        "erf",
        "erfc",
        "erf_inv",
        "bessel_i0e",
        "bessel_i1e",
        "zeta",
    }
)

# flops per output element of the special functions XLA computes by an iterative series (see
# the module docstring: their measured time per element over an ``exp``'s, rounded down)
ITERATIVE_COST = {
    "igamma": 64.0,
    "igammac": 64.0,
    "igamma_grad_a": 64.0,
    "random_gamma_grad": 64.0,
    "polygamma": 48.0,
    "zeta": 32.0,
    "regularized_incomplete_beta": 256.0,
}

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


def sub_jaxprs(eqn):
    """The jaxprs an equation runs (a call, a loop's body, a cond's branches)."""
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, jax.extend.core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, jax.extend.core.Jaxpr):
                found.append(item)
    return found


def _walk(jaxpr, cost) -> float:
    """``cost(eqn)`` summed over one run of ``jaxpr``: a while loop's body once (its trip count
    is dynamic), a ``scan``'s body times its length, a ``cond``'s costliest branch."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        inner = sub_jaxprs(eqn)
        if inner:
            costs = [_walk(sub, cost) for sub in inner]
            if eqn.primitive.name == "cond":
                total += max(costs)
            elif eqn.primitive.name == "scan":
                total += sum(costs) * int(eqn.params.get("length", 1))
            else:
                total += sum(costs)
            continue
        total += cost(eqn)
    return total


def _flops(eqn) -> float:
    name = eqn.primitive.name
    if name in _FREE:
        return 0.0
    out = sum(_size(var.aval) for var in eqn.outvars)
    if name == "dot_general":
        (contracting, _), _ = eqn.params["dimension_numbers"]
        lhs = getattr(eqn.invars[0].aval, "shape", ())
        return 2.0 * out * float(np.prod([lhs[d] for d in contracting])) if contracting else float(out)
    if name in _REDUCE:
        return float(sum(_size(var.aval) for var in eqn.invars))
    return float(out) * ITERATIVE_COST.get(name, 1.0)


def jaxpr_flops(jaxpr) -> float:
    """The floating-point operations of one run of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``)."""
    return _walk(jaxpr, _flops)


def jaxpr_elements(jaxpr, primitives) -> int:
    """The output elements of the equations of ``primitives`` (names, e.g.
    :data:`SPECIAL_FUNCTIONS` or ``{"gather"}``) in one run of ``jaxpr``, counted as
    :func:`jaxpr_flops` counts: what sizes the compiler options of a step
    (:func:`grepvi.inference.compilation_cache.step_compiler_options`)."""
    names = frozenset(primitives)

    def elements(eqn) -> float:
        if eqn.primitive.name not in names:
            return 0.0
        return float(sum(_size(var.aval) for var in eqn.outvars))

    return int(_walk(jaxpr, elements))


def longest_scan(jaxpr) -> int:
    """The most trips of a ``scan`` in ``jaxpr`` (nested ones included; 0 without one): a
    model's recursion over time (a filter, a GARCH variance, an ODE's Euler steps) shows here,
    the step's own loops (the repeats' ``while``) do not."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    most = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            most = max(most, int(eqn.params.get("length", 0)))
        for sub in sub_jaxprs(eqn):
            most = max(most, longest_scan(sub))
    return most

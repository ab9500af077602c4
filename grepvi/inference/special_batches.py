"""A step's special functions evaluated in batches: one call per function and level.

XLA expands every call of a special function (``lgamma``, ``digamma``, grepvi's own series in
:mod:`grepvi.numerics`) into tens of operations, and its fusion copies each into the fusions
that read it. A G-REP step of a model with beta and gamma latents calls them hundreds of
times: the nested-betas model's step (``benchmarks/frontier_models.py``) has 409 such calls in
its jaxpr, 90 distinct after XLA's common-subexpression elimination, and replacing the series
by one-line stand-ins cut its window's compilation from 11.4 to 4.4 s (``docs/performance.md``).

:func:`batched_special_functions` traces a function once, inlines the calls it makes
(``jit``, ``custom_jvp``, ``custom_vjp``: the function is evaluated, never differentiated
again), gives each equation a **level**, the most special-function calls on a path from the
inputs to it, and evaluates the equations level by level: the calls of one function at one
level depend on none of each other, so they run as one call on their inputs flattened and
concatenated, whose result is kept whole (``lax.optimization_barrier``: computed once, not
copied into each reader) and sliced back. The calls that share an input are evaluated once.
Loops' bodies and a ``cond``'s branches are batched inside themselves. Elementwise functions
give the same numbers up to rounding (XLA may vectorize a longer array differently: an ulp).

Measured (2-core CPU, the default procedure's first window compiled alone, small-model
options): nested betas 10.7 -> 4.1 s, the SIR epidemic 3.8 -> 1.7 s, GARCH 2.6 -> 1.4 s, the
pumps hierarchy 2.0 -> 1.4 s; a step 0.14 -> 0.16 ms, 0.26 -> 0.17, 0.43 -> 0.47, 0.11 ->
0.09; whole default fits 0.78-0.95 of the time on models built of beta, gamma and Dirichlet
terms (``docs/performance.md``, fifty-first session). Calls of more than ``MAX_ELEMENTS``
elements are left where they are: batching the data-sized calls of the Olivetti DEF made its
step 1.7 times slower (18 -> 31 ms; MNIST's MF 49 -> 117 ms), the copies into the
concatenation and the lost fusion with their readers costing more than the compilation saved;
:func:`grepvi.inference.fitting.setup` asks for batching only on models of up to
``SMALL_MODEL_ELEMENTS`` latent elements.
"""

import logging
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core
from jax.extend import source_info_util

from grepvi import numerics
from grepvi.inference.cost import SPECIAL_FUNCTIONS, sub_jaxprs
from grepvi.inference.jaxpr_rewrite import traced_flat, transformed_param

__all__ = ["batched_special_functions", "special_calls"]

_LOG = logging.getLogger(__name__)
_CALLS = ("pjit", "jit")
_LITERAL = "literal"
MIN_CALLS = 2  # special-function calls from which a function is evaluated in batches
MAX_ELEMENTS = 4096  # the largest call batched (elements of its input)


def _special_key(eqn):
    """The group an equation's batch belongs to (``None``: not a special function): grepvi's
    series by name, a primitive of :data:`grepvi.inference.cost.SPECIAL_FUNCTIONS` by name and
    parameters, each with its inputs' dtypes. Only elementwise calls whose inputs share one
    shape qualify."""
    name = eqn.primitive.name
    if name in _CALLS:
        series = eqn.params.get("name")
        if series not in numerics.ELEMENTWISE_SERIES:
            return None
        kind = ("series", series)
    elif name in SPECIAL_FUNCTIONS and not eqn.primitive.multiple_results:
        kind = ("primitive", name, tuple(sorted((k, repr(v)) for k, v in eqn.params.items())))
    else:
        return None
    avals = [var.aval for var in eqn.invars]
    if len(eqn.outvars) != 1 or any(a.shape != avals[0].shape for a in avals):
        return None
    if math.prod(avals[0].shape) > MAX_ELEMENTS:
        return None  # a data-sized call: its compilation is a small share, its fusion pays
    if eqn.outvars[0].aval.shape != avals[0].shape:
        return None
    return (*kind, tuple(str(a.dtype) for a in avals))


def _unspecified(shardings) -> bool:
    return all(type(s).__name__ == "UnspecifiedValue" for s in shardings)


def _inlined(eqn):
    """The closed jaxpr a call equation runs, where it can be inlined (``None`` otherwise)."""
    name = eqn.primitive.name
    if name in _CALLS:
        params = eqn.params
        shardings = (*params.get("in_shardings", ()), *params.get("out_shardings", ()))
        if not _unspecified(shardings):
            return None  # a sharded call keeps its boundary
        inner = params["jaxpr"]
    elif name.startswith(("custom_jvp_call", "custom_vjp_call")):
        inner = eqn.params.get("call_jaxpr", eqn.params.get("fun_jaxpr"))
    else:
        return None
    if not isinstance(inner, jex_core.ClosedJaxpr) or len(inner.jaxpr.invars) != len(eqn.invars):
        return None
    return inner


def special_calls(jaxpr) -> int:
    """The special-function calls in ``jaxpr`` (a jaxpr or closed jaxpr), sub-jaxprs included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        if _special_key(eqn) is not None:
            total += 1
        else:
            total += sum(special_calls(sub) for sub in sub_jaxprs(eqn))
    return total


def _batchable(jaxpr) -> bool:
    return special_calls(jaxpr) >= MIN_CALLS


class _Flat:
    """A jaxpr with its calls inlined: equations, each with the scope of the call it came
    from, and where each (scope, variable) reads its value from."""

    def __init__(self, jaxpr, consts, args):
        self.env = {}  # (scope, var) -> value
        self.alias = {}  # (scope, var) -> the key it reads
        self.literals = {}
        self.items = []  # (scope, eqn)
        self.scopes = 0
        for var, value in zip(jaxpr.constvars, consts, strict=True):
            self.env[(0, var)] = value
        for var, value in zip(jaxpr.invars, args, strict=True):
            self.env[(0, var)] = value
        self._add(jaxpr, 0)

    def key(self, scope, var):
        if isinstance(var, jex_core.Literal):
            self.literals[id(var)] = var
            return (_LITERAL, id(var))
        key = (scope, var)
        while key in self.alias:
            key = self.alias[key]
        return key

    def read(self, key):
        return self.literals[key[1]].val if key[0] == _LITERAL else self.env[key]

    def _add(self, jaxpr, scope):
        for eqn in jaxpr.eqns:
            inner = _inlined(eqn) if _special_key(eqn) is None else None
            if inner is None:
                self.items.append((scope, eqn))
                continue
            self.scopes += 1
            inside = self.scopes
            for var, value in zip(inner.jaxpr.constvars, inner.consts, strict=True):
                self.env[(inside, var)] = value
            for var, outer in zip(inner.jaxpr.invars, eqn.invars, strict=True):
                self.alias[(inside, var)] = self.key(scope, outer)
            self._add(inner.jaxpr, inside)
            for outer, var in zip(eqn.outvars, inner.jaxpr.outvars, strict=True):
                if not isinstance(outer, jex_core.DropVar):
                    self.alias[(scope, outer)] = self.key(inside, var)


def _schedule(flat: _Flat) -> list:
    """``(level, kind, index)`` of every equation, sorted: level ``L``'s special calls (kind
    0) before its other equations (kind 1), each kind in the jaxpr's order. Effects keep
    their order (an effectful equation's level is at least the previous one's)."""
    level = {}
    effects_level = 0
    order = []
    for index, (scope, eqn) in enumerate(flat.items):
        keys = [flat.key(scope, var) for var in eqn.invars]
        own = max((level.get(k, 0) for k in keys if k[0] != _LITERAL), default=0)
        special = _special_key(eqn) is not None
        own += int(special)
        if eqn.effects:
            own = effects_level = max(own, effects_level)
        for var in eqn.outvars:
            if not isinstance(var, jex_core.DropVar):
                level[(scope, var)] = own
        order.append((own, 0 if special else 1, index))
    order.sort()
    return order


def _batch(flat: _Flat, calls) -> None:
    """One call per group of ``calls`` (independent special-function equations), on their
    distinct inputs flattened and concatenated, its result computed once and sliced back."""
    groups = {}
    for scope, eqn in calls:
        groups.setdefault(_special_key(eqn), []).append((scope, eqn))
    for key, members in groups.items():
        distinct = {}
        for scope, eqn in members:
            inputs = tuple(flat.key(scope, var) for var in eqn.invars)
            distinct.setdefault(inputs, eqn)
        values = [
            [jnp.asarray(flat.read(k), var.aval.dtype) for k, var in zip(inputs, eqn.invars, strict=True)]
            for inputs, eqn in distinct.items()
        ]
        first = members[0][1]
        if len(values) == 1:
            with _source_of(first):
                outputs = [_call(key, first, values[0])]
        else:
            shapes = [eqn.invars[0].aval.shape for eqn in distinct.values()]
            sizes = [math.prod(shape) for shape in shapes]
            joined = [
                lax.concatenate([lax.reshape(v[i], (n,)) for v, n in zip(values, sizes, strict=True)], 0)
                for i in range(len(first.invars))
            ]
            with _source_of(first):
                result = lax.optimization_barrier(_call(key, first, joined))
            outputs, start = [], 0
            for shape, size in zip(shapes, sizes, strict=True):
                outputs.append(lax.reshape(lax.slice(result, (start,), (start + size,)), shape))
                start += size
        by_inputs = dict(zip(distinct, outputs, strict=True))
        for scope, eqn in members:
            inputs = tuple(flat.key(scope, var) for var in eqn.invars)
            if not isinstance(eqn.outvars[0], jex_core.DropVar):
                flat.env[(scope, eqn.outvars[0])] = by_inputs[inputs]


def _call(key, eqn, inputs):
    if key[0] == "series":
        return numerics.ELEMENTWISE_SERIES[key[1]](*inputs)
    return eqn.primitive.bind(*inputs, **eqn.params)


def _source_of(eqn):
    """Binds under ``eqn``'s traceback and name stack (as ``jax.core.eval_jaxpr`` does): the
    program's metadata and errors name the model's line, not this module."""
    name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
    return source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack)


def _evaluate(jaxpr, consts, *args):
    flat = _Flat(jaxpr, consts, args)
    order = _schedule(flat)
    position = 0
    while position < len(order):
        level, kind, _ = order[position]
        if kind == 0:
            calls = []
            while position < len(order) and order[position][:2] == (level, 0):
                calls.append(flat.items[order[position][2]])
                position += 1
            _batch(flat, calls)
            continue
        scope, eqn = flat.items[order[position][2]]
        position += 1
        inputs = [flat.read(flat.key(scope, var)) for var in eqn.invars]
        params = {name: transformed_param(value, _evaluate, _batchable) for name, value in eqn.params.items()}
        with _source_of(eqn), eqn.ctx.manager:
            outputs = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(params))
        if not eqn.primitive.multiple_results:
            outputs = [outputs]
        for var, value in zip(eqn.outvars, outputs, strict=True):
            if not isinstance(var, jex_core.DropVar):
                flat.env[(scope, var)] = value
    return [flat.read(flat.key(0, var)) for var in jaxpr.outvars]


def batched_special_functions(function: Callable) -> Callable:
    """``function`` (of pytrees of arrays) traced once and evaluated with its special
    functions in batches (module docstring), into the caller's trace. A function with fewer
    than two special-function calls is called as it is. Where the batched evaluation cannot
    be traced (a primitive it cannot bind again) the function is called as it is."""

    def evaluated(*args):
        closed, flat, out_tree = traced_flat(function, args)
        outputs = None
        if special_calls(closed) >= MIN_CALLS:
            try:
                outputs = _evaluate(closed.jaxpr, closed.consts, *flat)
            except Exception as error:  # noqa: BLE001 - an optimization: the function as it is
                _LOG.debug("special functions not batched: %s: %s", type(error).__name__, error)
        if outputs is None:  # what it bound before the error is dead code in the caller's trace
            outputs = jex_core.jaxpr_as_fun(closed)(*flat)
        return jax.tree_util.tree_unflatten(out_tree, outputs)

    return evaluated

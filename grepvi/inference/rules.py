"""Update rules of the default procedure, chosen by an index in the state: one compiled program.

The default procedure tries several update rules from the same start and keeps the best
(:mod:`grepvi.inference.controller`). Each rule is an optax-style transformation whose step size is an
argument of its update, so that every rule and every step size live in one optimizer state,
:class:`SwitchState`: the index of the rule in use, its step size, how many times the step's
gradient estimate is drawn and averaged (``repeats``, read by the step: see
:func:`grepvi.inference.state.step`), and the inner state of every rule. :func:`switch`
applies the selected rule with ``lax.switch`` (only that branch runs), so changing the rule,
the step size or the draws changes arrays of the state, never the program: the trial, the
stages and the final answer run in one compilation.

* ``natural``: natural-gradient steps with a KL trust region
  (:func:`grepvi.optim.natural_gradient.natural_gradient`), for families with a closed-form Fisher
  information.
* ``adam``: Adam (Kingma & Ba 2015) on the unconstrained parameters, positive ones in log
  scale (:func:`grepvi.optim.natural_gradient.positive_in_log_scale`).
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from grepvi.errors import ConfigError
from grepvi.optim.coupling import coupling_size
from grepvi.optim.natural_gradient import natural_gradient, positive_in_log_scale
from grepvi.optim.stale_moment import recent_adam

__all__ = [
    "Rule",
    "SwitchState",
    "Candidate",
    "natural_rule",
    "adam_rule",
    "switch",
    "select",
    "selected",
    "repeats",
    "clipped",
    "couple",
    "coupled",
    "uncouple",
    "first_switch",
    "default_candidates",
    "ADAM_TRIAL_FACTORS",
]

ADAM_TRIAL_FACTORS = (1.0, 10.0, 0.1)  # Adam's learning rates in the trial, times adam_step_size


class Rule(NamedTuple):
    """An update rule: ``init(params) -> state`` and
    ``update(grads, state, params, step_size) -> (updates, state)`` (fed the gradient of
    ``-ELBO``, as optax)."""

    name: str
    init: Callable
    update: Callable


class SwitchState(NamedTuple):
    """The optimizer state of :func:`switch`: which rule runs, at which step size, with how
    many repeats of the gradient estimate per step, and the inner state of every rule (only
    the selected one changes in a step)."""

    index: jax.Array  # int32
    step_size: jax.Array  # float32
    inner: tuple
    repeats: jax.Array = 1  # int32: gradient estimates averaged per step (the update ignores it)
    clipped: jax.Array = 0.0  # float32: the fraction of elements whose last step the rule shrank
    # (K, H, on) of the natural rule's coupled locations (grepvi.optim.coupling); None: none covered
    coupled: Any = None


class Candidate(NamedTuple):
    """A rule and a step size the trial may keep (``label`` e.g. ``"adam-0.1"``).

    ``linear``: the rule's step is linear in the gradient estimate (natural-gradient steps),
    so its averaged iterate's bias falls as ``1 / draws`` and the controller may raise the
    draws per step instead of halving the step. Adam's step is normalized by the gradient's
    running RMS: with ``D`` times the draws its noise in parameter space stays about ``rho``
    per step and its bias falls only as ``1 / sqrt(D)``; its step is halved instead.

    ``preferred``: kept on a tie with the trial's leader (within two standard errors), as
    if it had run first (the natural gradient, which runs after Adam 0.1: see
    :func:`default_candidates`)."""

    label: str
    index: int
    step_size: float
    linear: bool = False
    preferred: bool = False


def natural_rule(families: dict, max_kl: float) -> Rule:
    """Natural-gradient steps of size ``rho`` with a KL trust region of ``max_kl`` nats."""
    inner = natural_gradient(families, 1.0, max_kl)

    def update(grads, state, params, step_size, coupled=None):
        state = state._replace(step_size=jnp.asarray(step_size, jnp.float32))
        return inner.update(grads, state, params, coupled)

    return Rule("natural", inner.init, update)


def adam_rule(families: dict) -> Rule:
    """Adam at learning rate ``rho``, positive parameters in log scale, its second moment
    restarted where the gradient's scale has left it (:mod:`grepvi.optim.stale_moment`)."""
    template = positive_in_log_scale(families, recent_adam(1.0))

    def update(grads, state, params, step_size, coupled=None):
        rule = positive_in_log_scale(families, recent_adam(jnp.asarray(step_size, jnp.float32)))
        return rule.update(grads, state, params)

    return Rule("adam", template.init, update)


def switch(
    rules: Sequence[Rule], index: int = 0, step_size: float = 0.1, coupled_size: int = 0
) -> optax.GradientTransformation:
    """One optax transformation that applies ``rules[state.index]`` at ``state.step_size``.

    Every rule's state is initialized (they share nothing); ``lax.switch`` runs the selected
    branch alone. Set the rule and step size with :func:`select`. ``coupled_size``: the
    natural rule's coupled locations (:mod:`grepvi.optim.coupling`; 0: none), off until
    :func:`couple` sets their matrix.
    """
    rules = tuple(rules)
    if not rules:
        raise ConfigError("switch needs at least one rule")

    def init_fn(params):
        return SwitchState(
            index=jnp.asarray(index, jnp.int32),
            step_size=jnp.asarray(step_size, jnp.float32),
            inner=tuple(rule.init(params) for rule in rules),
            repeats=jnp.ones((), jnp.int32),
            clipped=jnp.zeros((), jnp.float32),
            coupled=_uncoupled(coupled_size) if coupled_size else None,
        )

    def update_fn(updates, state, params=None):
        def branch(i):
            def run(operands):
                grads, inner, params, rho = operands
                coupled = None if state.coupled is None else (state.coupled[0], state.coupled[2])
                new_updates, new_state = rules[i].update(grads, inner[i], params, rho, coupled)
                clipped = jnp.asarray(getattr(new_state, "clipped", 0.0), jnp.float32)
                return new_updates, inner[:i] + (new_state,) + inner[i + 1 :], clipped

            return run

        operands = (updates, state.inner, params, state.step_size)
        if len(rules) == 1:
            new_updates, inner, clipped = branch(0)(operands)
        else:
            new_updates, inner, clipped = jax.lax.switch(
                state.index, [branch(i) for i in range(len(rules))], operands
            )
        return new_updates, state._replace(inner=inner, clipped=clipped)

    return optax.GradientTransformation(init_fn, update_fn)


def _is_switch(node) -> bool:
    return isinstance(node, SwitchState)


def select(tree: Any, index: int, step_size: float, repeats: int = 1) -> Any:
    """``tree`` (a state holding one or more :class:`SwitchState`) with every switch set to
    rule ``index`` at ``step_size``, averaging ``repeats`` gradient estimates per step."""

    def set_one(node):  # host values: a device conversion compiles a program at its first call
        if not _is_switch(node):
            return node
        return node._replace(
            index=np.asarray(index, np.int32),
            step_size=np.asarray(step_size, np.float32),
            repeats=np.asarray(repeats, np.int32),
        )

    return jax.tree_util.tree_map(set_one, tree, is_leaf=_is_switch)


def _uncoupled(size: int) -> tuple:
    return (jnp.eye(size, dtype=jnp.float32), jnp.zeros((size, size), jnp.float32), jnp.zeros((size,), bool))


def couple(tree: Any, matrix, hessian, mask=None) -> Any:
    """``tree`` with every switch's natural rule stepping its covered locations coupled by
    ``matrix`` (``K``, the floored ``(-H)^{-1}`` of
    :func:`grepvi.optim.coupling.coupling_from_hessian`) and the step's estimate of their
    gradient taking ``hessian`` (the log joint's, there) as its control variate
    (:func:`grepvi.estimators.grep.path_entropy_correction`). ``mask``: the covered elements
    coupled (the others keep their mean-field step; None: all)."""

    def set_one(node):
        if not _is_switch(node) or node.coupled is None:
            return node
        size = node.coupled[2].shape[0]
        on = jnp.ones((size,), bool) if mask is None else jnp.asarray(mask, bool).reshape(size)
        coupled = (jnp.asarray(matrix, jnp.float32), jnp.asarray(hessian, jnp.float32), on)
        return node._replace(coupled=coupled)

    return jax.tree_util.tree_map(set_one, tree, is_leaf=_is_switch)


def uncouple(tree: Any) -> Any:
    """``tree`` with every switch's natural rule back to its mean-field steps (the matrices
    kept: the layout of the state does not change)."""

    def set_one(node):
        if not _is_switch(node) or node.coupled is None:
            return node
        matrix, hessian, on = node.coupled
        return node._replace(coupled=(matrix, hessian, jnp.zeros_like(on)))

    return jax.tree_util.tree_map(set_one, tree, is_leaf=_is_switch)


def coupled(tree: Any) -> bool:
    """Whether the first switch in ``tree`` steps its locations coupled."""
    node = first_switch(tree)
    return node is not None and node.coupled is not None and bool(jnp.any(node.coupled[2]))


def first_switch(tree: Any) -> SwitchState | None:
    """The first :class:`SwitchState` in ``tree`` (None if there is none)."""
    return next(
        (node for node in jax.tree_util.tree_leaves(tree, is_leaf=_is_switch) if _is_switch(node)), None
    )


def repeats(tree: Any):
    """The ``repeats`` array of the first :class:`SwitchState` in ``tree`` (traceable; None
    if there is none)."""
    node = first_switch(tree)
    return None if node is None else node.repeats


def clipped(tree: Any):
    """The ``clipped`` array of the first :class:`SwitchState` in ``tree``: the fraction of
    latent elements whose last step the selected rule shrank (a trust region; 0 for rules
    without one). Traceable; None if there is no switch."""
    node = first_switch(tree)
    return None if node is None else node.clipped


def selected(tree: Any) -> tuple[int, float] | None:
    """``(index, step size)`` of the first :class:`SwitchState` in ``tree`` (None if none)."""
    node = first_switch(tree)
    return None if node is None else (int(node.index), float(node.step_size))


def default_candidates(families: dict, step_size: float, max_kl: float, adam_step_size: float):
    """The default procedure's optimizer (a :func:`switch` of its rules) and its candidates,
    in the order the trial runs them.

    Adam at ``adam_step_size`` first, then ``natural`` at ``step_size`` where every family has
    a closed-form Fisher information (``preferred``: kept on a tie with Adam), then Adam at
    ``adam_step_size`` times 10 and 0.1 (a grid, as in Stan's eta adaptation). The first
    candidate runs the whole trial and the others stop where they trail it
    (:mod:`grepvi.inference.controller`), so the rule that is rarely far behind runs first:
    on the Olivetti DEF the natural gradient, first before, ran all its trial steps at an
    ELBO 35 times below Adam 0.1's. Returns ``(optimizer, candidates)``; the optimizer starts at the
    first candidate.
    """
    rules, candidates = [], []
    natural = all(family.has_fisher for family in families.values())
    if natural:
        rules.append(natural_rule(families, max_kl))
    adam_index = len(rules)
    rules.append(adam_rule(families))
    for position, factor in enumerate(ADAM_TRIAL_FACTORS):
        rate = adam_step_size * factor
        candidates.append(Candidate(f"adam-{rate:g}", adam_index, float(rate)))
        if position == 0 and natural:
            candidates.append(Candidate("natural", 0, float(step_size), linear=True, preferred=True))
    first = candidates[0]
    size = coupling_size(families) if natural else 0
    return switch(rules, first.index, first.step_size, size), candidates

"""Natural-gradient steps with a KL trust region, as an optax gradient transformation.

The update of latent element ``i`` is

    delta v_i = rho c_i F_i(v)^{-1} g_i,     c_i = min(1, sqrt(2 kappa / (rho^2 g_i^T F_i^{-1} g_i)))

(also shrunk so that no positive parameter changes by more than half its value) where
``F_i`` is the Fisher information of ``q(z_i; v_i)`` in the unconstrained parameters
(closed forms on the families: ``Family.fisher_solve``), ``g_i`` the ELBO gradient estimate,
``rho`` the step size and ``kappa`` the trust region: to second order, no element's
``q`` moves by more than ``kappa`` nats of KL divergence in one step (``KL ~ delta^T F delta /
2``; Amari 1998; the KL-bounded step of Khan & Nielsen 2018).

Why natural gradients: for a posterior in the family (conjugate models) the ELBO's Hessian at
the optimum *is* ``-F`` (the ELBO is ``-KL(q || p)`` up to a constant), so the natural step is
Newton's step there: the ill-conditioning of the gamma's and beta's parameters (a
shape that moves the variance at fixed mean, the coupled beta concentrations) is gone, and
one step size fits every latent and model scale. Per-coordinate scaling (Eq. 9, RMSProp,
Adam) divides by gradient *noise*, not curvature, and cannot do this. Where the model is far
from the family the natural step is still a sensible metric (it measures steps in KL), and
the trust region keeps early steps from the violent moves that an un-normalized natural
gradient of a large log joint would make (the start of the Olivetti DEF).

A family without closed-form Fisher information (a user's own) gets RMSProp's diagonal
scaling instead, ``g / sqrt(s)`` with ``s`` an exponential average of *past* squared
gradients (the current gradient left out of its own scale, which would bias the fixed point;
cf. PyMC's issue 8444).

The step size lives in the state (``NaturalGradientState.step_size``) so that a controller
(:mod:`grepvi.inference.controller`) can change it between compiled windows without recompiling.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from grepvi.families.base import Family
from grepvi.optim import coupling

__all__ = [
    "NaturalGradientState",
    "natural_gradient",
    "natural_direction",
    "fisher_mean_quad",
    "positive_in_log_scale",
    "cap_shapes",
]

_EMPIRICAL_DECAY = 0.9
# Shapes (gamma, beta, Dirichlet concentrations) are capped by the default procedure's rules
# at the family's ``max_shape`` (1e8 for a gamma: a relative sd of 1e-4; 1e6 for beta and
# Dirichlet, whose Fisher information's trigamma differences cancel to 0 near 3e6 in float32,
# making a natural step NaN). Without the cap, Adam in log scale (a constant relative step
# on a gradient of constant sign) drove beta shapes of the Omniglot MF to 5.8e34 in 5,000
# steps, then to inf (a GPU run: every later step non-finite, the run stalled).


class NaturalGradientState(NamedTuple):
    step_size: jax.Array  # rho
    max_kl: jax.Array  # kappa
    count: jax.Array
    second_moment: dict  # past squared gradients, for latents whose family has no Fisher form
    clipped: jax.Array = 0.0  # the fraction of latent elements whose last step was shrunk


def _expand(scale, leaf):
    return scale.reshape(scale.shape + (1,) * (leaf.ndim - scale.ndim))


def natural_direction(families: dict[str, Family], params: dict, grad: dict, second_moment=None):
    """``(F^{-1} g, g^T F^{-1} g)`` for every latent (the second per batch element)."""
    directions, lengths = {}, {}
    for name, family in families.items():
        if name not in grad:  # a subset of the latents (minibatch VI: globals and locals apart)
            continue
        if family.has_fisher:
            directions[name], lengths[name] = family.fisher_solve(params[name], grad[name])
        else:
            scale = second_moment[name]
            directions[name] = jax.tree_util.tree_map(
                lambda g, s: g / (jnp.sqrt(s) + 1e-8),
                grad[name],
                scale,
            )
            lengths[name] = sum(
                jnp.sum(g * d, axis=tuple(range(len(family.batch_shape), g.ndim)))
                for g, d in zip(
                    jax.tree_util.tree_leaves(grad[name]),
                    jax.tree_util.tree_leaves(directions[name]),
                    strict=True,
                )
            )
    return directions, lengths


def _relative_rate(v):
    """``d log softplus(v) / dv = sigmoid(v) / softplus(v)``: 1 for very negative ``v``."""
    # softplus written out with the sigmoid's exp shared: with numerics.softplus(v) here (a
    # custom JVP whose exp XLA does not share) the log-scale Adam rule took 4.5 ms per update
    # on the DEF's 920,000 parameters against 2.7 ms.
    exp_v = jnp.exp(jnp.clip(v, -15.0, 20.0))
    softplus = jnp.where(v > 20.0, v, jnp.log1p(exp_v))
    return jnp.where(v < -15.0, 1.0, exp_v / ((1.0 + exp_v) * softplus))


def _largest_relative_change(family, params, direction, rho):
    """Per batch element, the largest ``|d theta| / theta`` that the step ``rho * direction``
    makes in a positive parameter (first order), or 0 where the family has none."""
    batch_ndim = len(family.batch_shape)
    # the batch shape of these parameters (a minibatch's rows of a local latent: fewer rows)
    shape = jnp.shape(jax.tree_util.tree_leaves(params)[0])[:batch_ndim]
    largest = jnp.zeros(shape, jnp.float32)
    for key in family.positive_parameters:
        change = rho * jnp.abs(direction[key]) * _relative_rate(params[key])
        change = (
            jnp.max(change, axis=tuple(range(batch_ndim, change.ndim)))
            if change.ndim > batch_ndim
            else change
        )
        largest = jnp.maximum(largest, change)
    return largest


def fisher_mean_quad(families: dict[str, Family], params: dict, delta: dict) -> jax.Array:
    """Mean over all latent elements of ``delta^T F delta``. Its square root is a move in
    posterior standard deviations. Families without a Fisher form count relative changes of
    their positive parameters and absolute changes of the others."""
    total, count = 0.0, 0
    for name, family in families.items():
        if family.has_fisher:
            quad = family.fisher_quad(params[name], delta[name])
        else:  # relative changes for positive parameters, absolute ones otherwise
            quad = 0.0
            for key, leaf in delta[name].items():
                if key in family.positive_parameters:
                    leaf = leaf * _relative_rate(params[name][key])
                quad = quad + jnp.sum(leaf**2)
            quad = quad / math.prod(family.batch_shape)
        total = total + jnp.sum(quad)
        count += math.prod(family.batch_shape)
    return total / count


def natural_gradient(
    families: dict[str, Family], step_size: float = 0.5, max_kl: float = 0.5, max_relative_change: float = 0.5
) -> optax.GradientTransformation:
    """The natural-gradient transformation for ``families`` (fed the gradient of ``-ELBO``).

    Args:
      families: each latent's family (their ``fisher_solve`` gives ``F^{-1} g``).
      step_size: ``rho``; 1 is Newton's step at the optimum of a conjugate model.
      max_kl: ``kappa``, the largest KL divergence (nats, second order) that one step may move
        any element's ``q``.
      max_relative_change: the largest relative change of a positive parameter (a shape, a
        mean, a scale) in one step. The second-order KL is accurate only for moves small
        against the parameter: at a gamma shape of 60, ``kappa = 0.5`` alone allows a move of
        85 (to a negative shape, clipped by the softplus to ~0). The cap keeps each step a
        local one; far from the optimum the step is then at most a factor ``1.5`` per
        iteration, geometric progress in any scale.
    """
    families = dict(families)
    empirical = sorted(name for name, family in families.items() if not family.has_fisher)
    covered = coupling.covered_locations(families) if coupling.coupling_size(families) else ()

    def init_fn(params):
        return NaturalGradientState(
            step_size=jnp.asarray(step_size, jnp.float32),
            max_kl=jnp.asarray(max_kl, jnp.float32),
            count=jnp.zeros([], jnp.int32),
            second_moment={
                name: jax.tree_util.tree_map(jnp.zeros_like, params[name])
                for name in empirical
                if name in params
            },
            clipped=jnp.zeros([], jnp.float32),
        )

    def update_fn(updates, state, params=None, coupled=None):
        """``coupled``: ``(K, on)`` of :mod:`grepvi.optim.coupling`; where ``on``, the
        covered locations take the coupled step (Newton's step on them)."""
        if params is None:
            raise ValueError("natural_gradient needs the parameters: optimizer.update(g, state, params)")
        grad = jax.tree_util.tree_map(jnp.negative, updates)  # ascent direction of the ELBO
        first = state.count == 0
        moments = {
            name: jax.tree_util.tree_map(
                lambda g, s: jnp.where(first, g**2, s), grad[name], state.second_moment[name]
            )
            for name in empirical
            if name in grad
        }
        directions, lengths = natural_direction(families, params, grad, moments)
        rho = state.step_size
        new_updates = {}
        shrunk, elements = 0.0, 0
        for name, family in families.items():
            if name not in grad:
                continue
            length = jnp.maximum(lengths[name], 0.0)
            kl = 0.5 * rho**2 * length
            shrink = jnp.where(kl > state.max_kl, jnp.sqrt(state.max_kl / jnp.maximum(kl, 1e-30)), 1.0)
            relative = _largest_relative_change(family, params[name], directions[name], rho)
            shrink = jnp.minimum(shrink, max_relative_change / jnp.maximum(relative, 1e-30))
            shrunk = shrunk + jnp.sum(shrink < 1.0)
            elements += math.prod(jnp.shape(shrink)) if jnp.ndim(shrink) else 1
            new_updates[name] = jax.tree_util.tree_map(
                lambda d, shrink=shrink: (rho * _expand(shrink, d)).astype(d.dtype) * d, directions[name]
            )
        if coupled is not None and covered and all(name in grad for name, _ in covered):
            matrix, on = coupled
            locs, block_shrunk = coupling.coupled_locations(
                covered, families, params, grad, matrix, rho, state.max_kl, math.log1p(max_relative_change)
            )
            pieces = coupling.coupled_pieces(on, covered, families)
            for name, _ in covered:
                key = coupling.location_key(families[name])
                new_updates[name] = {
                    **new_updates[name],
                    key: jnp.where(pieces[name], locs[name], new_updates[name][key]),
                }
            block = jnp.sum(jnp.broadcast_to(on, (sum(size for _, size in covered),)))
            shrunk = jnp.where(jnp.any(on) & block_shrunk, jnp.maximum(shrunk, block), shrunk)
        new_moments = {
            name: jax.tree_util.tree_map(
                lambda g, s: _EMPIRICAL_DECAY * s + (1.0 - _EMPIRICAL_DECAY) * g**2,
                grad[name],
                moments[name],
            )
            for name in empirical
            if name in grad
        }
        new_updates = cap_shapes(families, params, new_updates)
        clipped = (shrunk / max(elements, 1)) if elements else jnp.zeros([], jnp.float32)
        return new_updates, NaturalGradientState(
            rho, state.max_kl, state.count + 1, new_moments, jnp.asarray(clipped, jnp.float32)
        )

    return optax.GradientTransformation(init_fn, update_fn)


def cap_shapes(families: dict[str, Family], params: dict, updates: dict) -> dict:
    """``updates`` with every shape parameter's new value ``v + u`` at most its family's
    ``max_shape``.

    The families store a shape as ``v = softplus^{-1}(theta - floor)``; above 20,
    ``softplus(v) = v`` in float32, so the cap is on ``v`` itself.
    """
    capped = {}
    for name, tree in updates.items():
        family = families.get(name)
        keys = getattr(family, "shape_parameters", ())
        cap = getattr(family, "max_shape", None)
        capped[name] = {
            key: (jnp.minimum(params[name][key] + u, cap) - params[name][key]).astype(u.dtype)
            if key in keys
            else u
            for key, u in tree.items()
        }
    return capped


class LogScaleState(NamedTuple):
    inner: optax.OptState


def positive_in_log_scale(families: dict[str, Family], inner: optax.GradientTransformation):
    """Runs ``inner`` with every positive parameter in log scale.

    The families store a positive ``theta`` as ``v = softplus^{-1}(theta - floor)`` (the
    paper's map). An additive optimizer on ``v`` (Adam) moves ``theta`` by at most its learning
    rate per step once ``theta`` is large, so a gamma mean of 100 is 1,000 steps away from 1
    at a rate of 0.1. Here ``inner`` sees the gradient with respect to ``u = log softplus(v)``
    (``dL/du = dL/dv softplus(v) / sigmoid(v)``) and its update ``du`` is applied as
    ``v' = softplus^{-1}(softplus(v) exp(du))``: a learning rate of 0.1 is a relative change of
    about 10% per step at any scale, and the progress is geometric. Other parameters (the
    Gaussians' locations) pass through unchanged. The step size of ``inner`` (an
    ``optax.inject_hyperparams`` state) stays settable from outside the compiled program.
    """
    from grepvi import numerics

    positive = {name: tuple(family.positive_parameters) for name, family in families.items()}

    def _map(tree, params, function):
        return {
            name: {
                key: function(value, params[name][key]) if key in positive.get(name, ()) else value
                for key, value in tree[name].items()
            }
            for name in tree
        }

    def to_log_gradient(g, v):
        return g / _relative_rate(v)  # d softplus(v) / d log softplus(v) = softplus / sigmoid

    def init_fn(params):
        return LogScaleState(inner.init(params))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("positive_in_log_scale needs the parameters")
        log_updates = _map(updates, params, to_log_gradient)
        step, inner_state = inner.update(log_updates, state.inner, params)

        def apply(du, v):
            log_theta = jnp.where(v < -15.0, v, jnp.log(numerics.softplus(jnp.maximum(v, -15.0))))
            new_log_theta = log_theta + jnp.clip(du, -10.0, 10.0)
            # softplus^{-1}(theta) = log(expm1(theta)), = log(theta) for tiny theta
            new_v = jnp.where(
                new_log_theta < -15.0,
                new_log_theta,
                numerics.inverse_softplus(jnp.exp(jnp.maximum(new_log_theta, -15.0))),
            )
            return new_v - v

        return cap_shapes(families, params, _map(step, params, apply)), LogScaleState(inner_state)

    return optax.GradientTransformation(init_fn, update_fn)

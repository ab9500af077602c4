"""A quadratic expansion of the log joint, fitted to past draws, as a control variate for G-REP.

Miller, Foti, D'Amour & Adams (2017), "Reducing reparameterization gradient variance";
Geffner & Domke (2020), "Approximation based variance reduction for reparameterization
gradients". With ``x`` the covered latents in the target's input space (the log space of their
supports, :meth:`~grepvi.families.base.Family.log_space_transform`), ``m(v)`` and ``s^2(v)``
their means and variances under the mean-field ``q``
(:meth:`~grepvi.families.base.Family.input_moments`) and ``c = m(v)`` with no gradient::

    f~(x) = g . (x - c) + 1/2 (x - c)' H (x - c)
    E_q[f~] = g . (m - c) + 1/2 (m - c)' H (m - c) + 1/2 sum_i H_ii s_i^2

(the elements are independent under ``q``, so only ``H``'s diagonal meets the variances). The
estimate is G-REP's of ``grad_v E_q[f - f~]`` (``g_rep + g_corr`` of the residual) plus the
exact ``grad_v E_q[f~]``: unbiased for any ``g`` and ``H`` that do not depend on the step's own
draws. Where the log joint is close to quadratic the residual is small and so is its noise:
for a Gaussian log joint and Gaussian-based families every draw gives the exact gradient,
including the coupling between latents that a mean-field ``q`` cannot hold (the path
derivative, "sticking the landing", cancels only the diagonal part and leaves ``H_ab sigma_b
eps_b`` in ``a``'s gradient).

``g`` and ``H`` come from the past steps' draws (:class:`RunningExpansion`), not from a Hessian
of the model: each draw's input gradient ``y = grad f(x)`` (free in the reverse pass) is
regressed on ``x``. Per step, ``g_t`` is the draws' mean ``y`` and ``H_t = Cov(y, x) / s^2``
(column ``j`` over ``x_j``'s variance, known exactly under ``q``; by Stein's identity the
``q``-average Hessian where ``x`` is Gaussian, and the least-squares slope of ``y`` on ``x``
otherwise); both are running averages over about the last ``1 / (1 - decay)`` steps,
corrected for their start at 0 as Adam's moments are. A Hessian of the model at one point
cost a small model's compilation 0.8-2.2 s (Dugongs 2.8 -> 3.7 s) and a data-bound step 27%
(the beta regression 0.91 -> 1.15 ms); the regression adds 0.3-0.5 s of compilation and no
evaluation of the model.

Opt-in (``grep(control_variate="quadratic")``, ``fit(..., estimator_options=...)``), not the
default procedure's: measured on twelve of the 36 small textbook models and six more one by
one (``docs/performance.md``, thirty-fourth session), it cut the time to the answer where a
strong coupling or a near-Gaussian posterior left the noise of the path derivative (a
two-normal ridge 5.98 -> 4.47 s, a two-component mixture 14.99 -> 12.18 s, Dugongs 7.99 ->
7.34 s), but it cost the others 0.3-0.5 s of compilation, its regression's own noise was
larger than the path derivative's on a weakly coupled 21-element logistic regression
(per-draw variance 2-11x), and where ``q`` starts far wider than the posterior the regression
fits the log joint's tails (a Weibull regression diverged, a horseshoe ran to its iteration
cap, a gamma-Dirichlet hierarchy took 24 times the iterations).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "Expansion",
    "RunningExpansion",
    "covered_latents",
    "covered_elements",
    "init",
    "expansion",
    "evaluate",
    "expectation",
    "draw_statistics",
    "advance",
    "DECAY",
]

DECAY = 0.9  # the running regression's weight on the past: about the last 10 steps


class Expansion(NamedTuple):
    """``f~``'s centre, gradient and Hessian over the covered latents (flattened in sorted
    order of ``names``)."""

    names: tuple
    center: jax.Array
    gradient: jax.Array
    hessian: jax.Array


class RunningExpansion(NamedTuple):
    """The running averages of the draws' input gradients (``gradient``) and of their
    regression slopes on the inputs (``hessian``), and the weight of the past they hold
    (``1 - decay^t`` after ``t`` steps: the averages over it are the estimates)."""

    gradient: jax.Array
    hessian: jax.Array
    weight: jax.Array


def covered_latents(families: dict, log_space: bool) -> tuple:
    """The latents whose input moments the families give in closed form (sorted)."""
    return tuple(sorted(name for name, family in families.items() if family.has_input_moments(log_space)))


def covered_elements(families: dict, log_space: bool) -> int:
    """How many elements the covered latents hold."""
    return sum(_size(families[name].shape) for name in covered_latents(families, log_space))


def _size(shape) -> int:
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def init(families: dict, log_space: bool) -> RunningExpansion:
    """No expansion yet: ``f~ = 0`` until the first step's draws."""
    n = covered_elements(families, log_space)
    return RunningExpansion(
        jnp.zeros(n, jnp.float32), jnp.zeros((n, n), jnp.float32), jnp.zeros([], jnp.float32)
    )


def _flat(values: dict, names: tuple) -> jax.Array:
    if not names:  # nothing covered: an empty expansion, f~ = 0
        return jnp.zeros((0,), jnp.float32)
    return jnp.concatenate([jnp.ravel(values[name]) for name in names])


def _moments(params: dict, families: dict, names: tuple, log_space: bool):
    moments = {name: families[name].input_moments(params[name], log_space) for name in names}
    mean = _flat({name: m for name, (m, _) in moments.items()}, names)
    variance = _flat({name: v for name, (_, v) in moments.items()}, names)
    return mean, variance


def expansion(running: RunningExpansion, params: dict, families: dict, log_space: bool) -> Expansion:
    """The expansion the running averages give, centred at ``q``'s input means (no gradient)."""
    names = covered_latents(families, log_space)
    center, _ = _moments(jax.lax.stop_gradient(params), families, names, log_space)
    known = running.weight > 0
    scale = jnp.where(known, 1.0 / jnp.where(known, running.weight, 1.0), 0.0)
    hessian = running.hessian * scale
    return Expansion(names, center, running.gradient * scale, 0.5 * (hessian + hessian.T))


def evaluate(expansion: Expansion, inputs: dict, families: dict):
    """``(f~(x), local)``: the expansion at a draw's inputs and each covered element's share
    ``f~_i`` (every term of ``f~`` that holds ``x_i``, its Markov blanket in ``f~``:
    ``d_i (g_i + (H d)_i) - H_ii d_i^2 / 2``), per latent in its family's batch shape."""
    d = _flat(inputs, expansion.names) - expansion.center
    hd = expansion.hessian @ d
    total = expansion.gradient @ d + 0.5 * d @ hd
    share = d * (expansion.gradient + hd) - 0.5 * jnp.diagonal(expansion.hessian) * d * d
    local, start = {}, 0
    for name in expansion.names:
        size = _size(families[name].shape)
        local[name] = share[start : start + size].reshape(families[name].batch_shape)
        start += size
    return total, local


def expectation(expansion: Expansion, params: dict, families: dict, log_space: bool) -> jax.Array:
    """``E_q[f~]`` as a function of ``params`` (through the covered latents' moments)."""
    mean, variance = _moments(params, families, expansion.names, log_space)
    delta = mean - expansion.center
    return (
        expansion.gradient @ delta
        + 0.5 * delta @ (expansion.hessian @ delta)
        + 0.5 * jnp.diagonal(expansion.hessian) @ variance
    )


def draw_statistics(
    expansion: Expansion, input_gradient: dict, inputs: dict, params: dict, families: dict, log_space: bool
):
    """What one draw tells the regression: its input gradient ``y``, its standardized offset
    ``u = (x - m) / s^2`` and their outer product (averaged over the step's draws, then
    :func:`advance`)."""
    _, variance = _moments(jax.lax.stop_gradient(params), families, expansion.names, log_space)
    y = _flat(input_gradient, expansion.names)
    u = (jax.lax.stop_gradient(_flat(inputs, expansion.names)) - expansion.center) / variance
    return {"y": y, "u": u, "yu": jnp.outer(y, u)}


def advance(running: RunningExpansion, statistics: dict, decay: float = DECAY) -> RunningExpansion:
    """The running averages after a step whose draws averaged ``statistics``: ``g_t = mean y``,
    ``H_t = mean(y u') - g mean(u)'`` with ``g`` the running gradient before the step (the
    step's own ``mean y`` at the first step). ``u`` has mean 0 under ``q`` exactly and ``g``
    does not depend on the step's draws, so ``E[H_t] = Cov(y, x) / s^2`` at any number of draws;
    centred by the step's own ``mean y`` (until the fifty-fifth session) it was ``(n - 1) / n``
    of that, exactly 0 at one draw a step: a Hawkes process's first stage (one draw a step),
    run again with the control variate, ended at 0.0586 sd against 0.0601 without it (0.0338
    now), and the next stage's draws, sized by that error, were 64 where 30 now reach the
    tolerance (the fit 16.6 -> 8.3 s; on the tests' ridge, 20 seeds of 300 steps, the Hessian
    was 27% low at 4 draws a step before, within 4% now). A step with a non-finite statistic
    leaves them as they were."""
    y, u, yu = statistics["y"], statistics["u"], statistics["yu"]
    known = running.weight > 0
    centre = jnp.where(known, running.gradient / jnp.where(known, running.weight, 1.0), y)
    slope = yu - jnp.outer(centre, u)
    finite = jnp.logical_and(jnp.all(jnp.isfinite(y)), jnp.all(jnp.isfinite(slope)))
    return RunningExpansion(
        gradient=jnp.where(finite, decay * running.gradient + (1.0 - decay) * y, running.gradient),
        hessian=jnp.where(finite, decay * running.hessian + (1.0 - decay) * slope, running.hessian),
        weight=jnp.where(finite, decay * running.weight + (1.0 - decay), running.weight),
    )

"""The generalized reparameterization gradient (G-REP), by automatic differentiation.

Ruiz, Titsias & Blei (2016), Eqs. 7-8 and Algorithm 1::

    grad L = g_rep + g_corr + grad H
    g_rep  = E_q[ grad_z f(z) h(T^{-1}(z; v); v) ],       h = grad_v T(eps; v)
    g_corr = E_q[ f(z) grad_v log q_eps(eps; v) ],        eps = T^{-1}(z; v)

Both terms are the gradient of one surrogate (the form of Schulman et al. 2015 and of
numpyro's ``TraceGraph_ELBO``): with ``eps_hat = stop_gradient(T^{-1}(z; v))``,

    grad_v [ f(T(eps_hat; v)) + sum_i stop_gradient(f_i(z)) log q_eps(eps_hat_i; v_i) + H(v) ]

where ``f_i`` is the local log joint of latent element ``i`` (its Markov blanket; the whole
log joint when the target has no local structure). Using ``f_i`` instead of ``f`` in
``g_corr`` is unbiased because ``E[grad_{v_i} log q_eps(eps_i; v_i)] = 0`` and the terms
outside the blanket do not depend on ``z_i``. This works for any family with a
differentiable standardization, a user's own included.

For the Gaussian-based families (``eps`` standard normal whatever the parameters, so
``g_corr = 0``) the entropy's gradient is taken by the path derivative of Roeder, Wu &
Duvenaud (2017), "sticking the landing": ``grad_v H`` is replaced by the draw's
``grad_v [-log q(T(eps; v); stop_gradient(v))]``, whose mean is ``grad_v H`` (the dropped
score term has mean zero) and whose noise cancels the model's where ``q`` matches the
posterior: for a Gaussian posterior in the family every draw's gradient is zero at the
optimum, and for a near-Gaussian one (a regression on many rows) the averaged iterate's Monte
Carlo error falls by a large factor (:func:`path_entropy_correction`). For the gamma, beta and
Dirichlet families (``g_corr != 0``) the same holds with G-REP applied to ``F = f - log q(z;
stop(v))``, whose draws are zero where ``q`` is the posterior
(:func:`standardized_entropy_path`).

The correction's control variate (the baseline ``b_i`` subtracted from ``f_i``) is by default
``f_i`` at the variational means plus a running average, over the past steps' draws, of how far
the draws' ``f_i`` lay from it (:class:`RunningBaseline`, carried by the step): an estimate of
``E_q[f_i]``, the constant that minimizes the term's variance to first order. The value at the
means alone (:func:`baseline_log_joints`, the stateless estimate's baseline) follows ``q`` at
once but is far from ``E_q[f_i]`` for small gamma shapes, whose mean lies in the tail; that
offset changes slowly, so its running average does not lag where a running average of ``f_i``
itself does (tried: on the Olivetti DEF it made each Adam step worth less, ELBO -6.97e6 against
-6.62e6 after 1,500 steps).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from grepvi.errors import ConfigError
from grepvi.estimators import quadratic_control_variate
from grepvi.estimators.base import (
    CarriedState,
    EstimateInfo,
    Estimator,
    register_estimator,
    sample_standardized,
    total_entropy,
    transform_all,
)
from grepvi.families.beta import Beta
from grepvi.families.dirichlet import Dirichlet
from grepvi.families.gamma import Gamma
from grepvi.families.generalized_dirichlet import GeneralizedDirichlet
from grepvi.families.location_scale import LocationScale
from grepvi.optim import coupling
from grepvi.target import Target, inputs_at_means, local_log_joints
from grepvi.validation import positive_int

__all__ = [
    "grep",
    "grep_surrogate",
    "path_entropy_correction",
    "baseline_log_joints",
    "baseline_values",
    "standardized_entropy_path",
    "RunningBaseline",
    "BASELINE_DECAY",
    "init_running_baseline",
    "advance_running_baseline",
    "running_offsets",
    "average_gradient_variance",
    "multi_sample",
    "multi_sample_carried",
]

BASELINE_DECAY = 0.9  # the running baseline's weight on the past: about the last 10 steps


def baseline_log_joints(params, target: Target) -> dict:
    """``b_i = f_i(E_q[z])``: each element's local log joint at the variational means.

    A control variate for ``g_corr``: ``b_i`` does not depend on the draw, and
    ``E[grad_v log q_eps(eps; v)] = 0``, so ``E[(f_i(z) - b_i) grad_v log q_eps] = g_corr``
    exactly, while ``f_i(z) - b_i`` is small where ``q`` is concentrated (a large gamma
    shape: at the optimum of a gamma-Poisson model with posterior shape 96 the per-draw
    variance of the shape's gradient falls from 35 to about 1 in natural units).
    """
    means = inputs_at_means(jax.lax.stop_gradient(params), target.families, target.log_space)
    if target.local_logdensity_fn is None:
        total = target.logdensity_fn(means)
        return {name: jnp.broadcast_to(total, family.batch_shape) for name, family in target.families.items()}
    return target.local_logdensity_fn(means)


class RunningBaseline(NamedTuple):
    """Each latent element's running averages of ``d_i = f_i(z) - f_i(E_q[z])`` (its local log
    joint at a draw less its value at the means) and of ``d_i^2`` over the draws of the past
    steps, started at 0::

        offset_t = decay offset_{t-1} + (1 - decay) d^(t)
        square_t = decay square_{t-1} + (1 - decay) (d^(t))^2

    The baseline is ``f_i(E_q[z]) + lambda_i offset_i``, with the offset shrunk by its own
    noise, ``lambda = offset^2 / (offset^2 + v (1 - decay) / (1 + decay))`` where ``v =
    square - offset^2`` is the draws' variance about it (:func:`running_offsets`): the value at
    the means alone where the offset is not known better than its noise (a large gamma shape,
    whose mean is a typical draw; ``q`` moving faster than the average follows, which widens
    ``v``), the running offset where it stands out (a small gamma shape, whose mean lies in the
    tail). An element's non-finite ``d_i`` leaves its averages as they were.
    """

    offset: dict
    square: dict


def init_running_baseline(families: dict) -> RunningBaseline:
    """The baseline before the first step: no offset."""
    zeros = {name: jnp.zeros(family.batch_shape, jnp.float32) for name, family in families.items()}
    return RunningBaseline(zeros, dict(zeros))


def running_offsets(state: RunningBaseline, decay: float = BASELINE_DECAY) -> dict:
    """``lambda_i offset_i``, each running offset shrunk by its noise (:class:`RunningBaseline`)."""
    shrunk = {}
    for name, offset in state.offset.items():
        variance = jnp.maximum(state.square[name] - offset**2, 0.0)
        noise = variance * ((1.0 - decay) / (1.0 + decay))
        signal = offset**2
        shrunk[name] = jnp.where(signal > 0, offset * signal / jnp.maximum(signal + noise, 1e-30), 0.0)
    return shrunk


def advance_running_baseline(
    state: RunningBaseline, offsets: dict, decay: float = BASELINE_DECAY
) -> RunningBaseline:
    """The baseline after a step whose draws' offsets ``f_i(z) - f_i(E_q[z])`` averaged
    ``offsets``."""
    offset, square = {}, {}
    for name, value in offsets.items():
        old, old_square = state.offset[name], state.square[name]
        value = jnp.asarray(value, old.dtype)
        finite = jnp.isfinite(value)
        offset[name] = jnp.where(finite, decay * old + (1.0 - decay) * value, old)
        square[name] = jnp.where(finite, decay * old_square + (1.0 - decay) * value**2, old_square)
    return RunningBaseline(offset, square)


def path_entropy_correction(params, eps, families: dict, location_hessian=None, covered=()):
    """A term whose gradient turns the analytic ``grad_v H`` of the Gaussian-based families
    into the path derivative of Roeder, Wu & Duvenaud (2017); its value is not used.

    For ``q(z) = N(zeta; mu, sigma) |d zeta / dz|`` with ``zeta = mu + sigma eps`` and
    ``z = T(zeta)``, one draw of ``-log q(z)`` with the parameters of the density stopped is::

        (zeta - stop(mu))^2 / (2 stop(sigma)^2) + log stop(sigma) + log |dz / d zeta| + const

    differentiated through ``zeta`` only. Its expectation's gradient is ``grad_v H`` (the score
    ``grad_v log q`` at fixed ``z`` has mean zero); the analytic entropy, which the surrogate
    already holds, is subtracted so that only the gradient changes. Families whose
    standardization depends on their parameters (gamma, beta, Dirichlet: ``g_corr != 0``) take
    :func:`standardized_entropy_path`, which puts ``-log q`` in ``g_corr``'s weight too.

    ``location_hessian``: ``(H, on)`` over the ``covered`` locations (``((name, size), ...)``,
    :func:`grepvi.optim.coupling.covered_locations`). Where ``on``, their gradient is the
    model's path derivative less ``H (zeta - mu)`` (mean zero: unbiased for any ``H``) instead
    of the path derivative's ``(zeta - mu) / sigma^2``, which is ``-diag(H) (zeta - mu)`` at a
    Gaussian optimum: it cancels only the diagonal of the model's ``H (z - mu)``. In units of
    ``sigma`` the location's noise is then ``(I - R) eps`` against ``(R - R_H) eps`` (``R`` the
    model's Hessian's correlation, ``R_H`` the given one's): along a direction the posterior
    hardly curves (``R``'s eigenvalue ``lambda ~ 0``) the averaged iterate's error grows as
    ``1 / lambda^2`` with the diagonal alone (:mod:`grepvi.optim.coupling`, whose coupled steps
    set it).
    """
    names = {name for name, _ in covered}
    on = None
    if location_hessian is not None and names and names <= set(families):
        hessian, on = location_hessian
        pieces = coupling.coupled_pieces(on, covered, families)
    total = 0.0
    offsets = {}
    for name, family in families.items():
        if on is not None and name in names and coupling.is_gamma(family):
            # log z - E[log z] = sqrt(psi_1(alpha)) eps, through the log-mean only
            # (standardized_entropy_path leaves that path out)
            log_mean = jnp.log(family.mean(params[name]))
            _, variance = family.input_moments(jax.lax.stop_gradient(params[name]), True)
            offsets[name] = log_mean - jax.lax.stop_gradient(log_mean) + jnp.sqrt(variance) * eps[name]
            continue
        if not isinstance(family, LocationScale) and not coupling.is_unconstrained_normal(family):
            continue
        natural = family.natural_params(params[name])
        loc, scale = natural["loc"], natural["scale"]
        fixed_loc, fixed_scale = jax.lax.stop_gradient(loc), jax.lax.stop_gradient(scale)
        if on is not None and name in names:
            offsets[name] = loc - fixed_loc + fixed_scale * eps[name]  # zeta - mu, through mu only
            loc = jnp.where(pieces[name], fixed_loc, loc)
        zeta = loc + scale * eps[name]
        quadratic = 0.5 * jnp.square((zeta - fixed_loc) / fixed_scale)
        log_det = family.log_abs_det_jacobian(params[name], eps[name])
        if jnp.shape(log_det) == jnp.shape(zeta):
            neg_log_q = jnp.sum(quadratic + log_det - jnp.log(scale) + jnp.log(fixed_scale))
        else:  # an ordered latent's log-Jacobian is one value per event: summed, not broadcast
            neg_log_q = jnp.sum(quadratic - jnp.log(scale) + jnp.log(fixed_scale)) + jnp.sum(log_det)
        total = total + neg_log_q - jnp.sum(family.entropy(params[name]))
    if offsets:
        d = jnp.concatenate([jnp.ravel(offsets[name]) for name, _ in covered])
        # a branch, not a select: while the locations are not coupled (most runs) no draw
        # computes the product (as a select: eight schools' draw 15.7 us, 14.0 without the
        # coupled block; a step at 32 draws 5-9% longer than with the branch)
        total = total + jax.lax.cond(
            jnp.any(on), lambda d: -0.5 * jnp.dot(d, hessian @ d), lambda d: jnp.zeros((), d.dtype), d
        )
    return total


def has_standardized_entropy_path(family) -> bool:
    """Whether a family's entropy gradient is taken by :func:`standardized_entropy_path`: the
    families of the paper whose standardization depends on their parameters (gamma, beta,
    Dirichlet, and the generalized Dirichlet's beta sticks: ``g_corr != 0``)."""
    return isinstance(family, (Gamma, Beta, Dirichlet, GeneralizedDirichlet))


def standardized_entropy_path(
    params, eps, latents, families: dict, log_space: bool, covered=(), location_hessian=None, coupled=()
):
    """The entropy's path derivative for the families with ``g_corr != 0``: a term whose
    gradient replaces their analytic ``grad_v H`` (its value is not used), and each latent's
    ``log q(z; stop(v))`` per element, subtracted from its local log joint in ``g_corr``.

    ``grad_v E_q[f(z) - log q(z; v)] = grad_v E_{q_v}[F(z)]`` with ``F(z) = f(z) - log q(z;
    stop(v))``: the score's mean ``E_q[grad_v log q(z; v)]`` is 0. G-REP's two terms (Ruiz et
    al. 2016, Eqs. 7-8) apply to ``F`` as to ``f``: ``g_rep`` differentiates ``-log q(z;
    stop(v))`` through ``z = T(eps; v)`` too, and ``g_corr`` weighs the element's
    ``grad_v log q_eps`` by ``F_i = f_i - log q_i(z_i; stop(v))`` (its baseline
    :func:`baseline_values` alike). Unbiased for any ``q``. Where ``q`` is the posterior (a
    conjugate element given the others), ``F`` does not depend on ``z`` and both terms are 0
    draw by draw: Roeder, Wu & Duvenaud (2017)'s "sticking the landing", which
    :func:`path_entropy_correction` applies to the Gaussian-based families, generalized to
    G-REP's. A gamma-Poisson model of 20 rates with prior shape 0.1 (17 of them unobserved:
    posterior shapes 0.1) reached the draws cap unconverged after 35 s with the analytic
    entropy's gradient and converged in 3.9 s with this one.

    ``latents``: the draw as the target receives it; ``log q`` is evaluated at the draw in the
    log space of the support (``log z``, ``logit z``: :meth:`Family.log_space_transform`), where
    a small shape's draw is not rounded to 0. ``location_hessian``, ``coupled``: the coupled
    block's ``(H, on)`` and its covered latents (``((name, size), ...)``): a coupled gamma's
    path through its log-mean is left to :func:`path_entropy_correction`.
    """
    names = set(covered)
    pieces = {}
    if location_hessian is not None and coupled:
        pieces = coupling.coupled_pieces(location_hessian[1], coupled, families)
    total = 0.0
    own = {}
    for name, family in families.items():
        if name in names or not has_standardized_entropy_path(family):
            continue
        u = latents[name] if log_space else family.log_space_transform(params[name], eps[name])
        entropy_params = params[name]
        if name in pieces and coupling.is_gamma(family):
            on = pieces[name]
            # a coupled gamma's log-mean: its path here would cancel only the diagonal of the
            # log joint's curvature; path_entropy_correction takes the whole of it (``H``)
            log_mean = jnp.log(family.mean(params[name]))
            u = u - jnp.where(on, log_mean - jax.lax.stop_gradient(log_mean), 0.0)
            fixed_mean = jax.lax.stop_gradient(params[name]["mean"])
            entropy_params = {**params[name], "mean": jnp.where(on, fixed_mean, params[name]["mean"])}
        log_q = family.log_prob_log_space(jax.lax.stop_gradient(params[name]), u)
        own[name] = jax.lax.stop_gradient(log_q)
        total = total - jnp.sum(log_q) - jnp.sum(family.entropy(entropy_params))
    return total, own


def baseline_values(params, target: Target, sticking_the_landing: bool) -> dict:
    """:func:`baseline_log_joints`, less ``log q_i`` at the means for the latents whose
    ``g_corr`` weight is ``F_i = f_i - log q_i`` (:func:`standardized_entropy_path`)."""
    values = baseline_log_joints(params, target)
    if not sticking_the_landing:
        return values
    fixed = jax.lax.stop_gradient(params)
    for name, family in target.families.items():
        if has_standardized_entropy_path(family):
            at_mean = family.log_prob_log_space(fixed[name], family.log_space_mean(fixed[name]))
            values = {**values, name: values[name] - at_mean}
    return values


def grep_surrogate(
    params, eps, target: Target, baseline: dict | None = None, sticking_the_landing: bool = False
):
    """Surrogate whose gradient is one G-REP sample and whose value is the ELBO estimate.

    ``baseline``: per-element values subtracted from the local log joints in ``g_corr``
    (:func:`baseline_log_joints`, :class:`RunningBaseline`; unbiased for any value that does not
    depend on ``eps``; a non-finite value: no baseline for that element).
    ``sticking_the_landing``: the entropy gradient by its path derivative
    (:func:`path_entropy_correction`, :func:`standardized_entropy_path`).
    """
    value, (elbo, *_) = _surrogate_and_local(params, eps, target, baseline, sticking_the_landing)
    return value, elbo


def _surrogate_and_local(
    params, eps, target: Target, baseline, sticking_the_landing, expansion=None, probe=None
):
    """:func:`grep_surrogate` with the draw's local log joints ``f_i(z)`` beside the ELBO.

    ``expansion``: the log joint's quadratic expansion
    (:mod:`grepvi.estimators.quadratic_control_variate`): the gradient is G-REP's of the
    residual ``f - f~`` (its local log joints ``f_i - f~_i`` in ``g_corr``) plus the exact
    gradient of ``E_q[f~]``, and the covered latents take the analytic entropy gradient (the
    expansion already cancels what the path derivative would). ``probe``: zeros added to
    those latents' inputs to the log joint, whose gradient is then the draw's input gradient
    (``latents``, the inputs, is returned beside the local log joints)."""
    families = target.families
    latents = transform_all(params, eps, families, target.log_space)
    inputs = latents if probe is None else {**latents, **{n: latents[n] + probe[n] for n in probe}}
    log_joint = target.logdensity_fn(inputs)
    residual, covered = log_joint, ()
    if expansion is not None:
        approx, approx_local = quadratic_control_variate.evaluate(expansion, latents, families)
        residual, covered = log_joint - approx, expansion.names
    if target.local_logdensity_fn is None:
        local = {
            name: jnp.broadcast_to(jax.lax.stop_gradient(residual), family.batch_shape)
            for name, family in families.items()
        }
    else:
        local = local_log_joints(target, jax.lax.stop_gradient(latents))
        if expansion is not None:
            local = {
                name: value - jax.lax.stop_gradient(approx_local[name]) if name in approx_local else value
                for name, value in local.items()
            }
    correction = 0.0
    if expansion is not None:
        mean_approx = quadratic_control_variate.expectation(expansion, params, families, target.log_space)
        correction = mean_approx - approx
    if sticking_the_landing:
        coupled = () if target.location_hessian is None else coupling.covered_locations(families)
        path, own = standardized_entropy_path(
            params,
            eps,
            latents,
            families,
            target.log_space,
            covered,
            target.location_hessian,
            coupled,
        )
        correction = correction + path
        local = {name: value - own[name] if name in own else value for name, value in local.items()}
    for name, family in families.items():
        log_q_eps = family.log_prob_standardized(params[name], eps[name])
        weight = local[name] if baseline is None else local[name] - baseline[name]
        weight = jnp.where(jnp.isfinite(weight), weight, local[name])
        correction = correction + jnp.sum(jax.lax.stop_gradient(weight) * log_q_eps)
    if sticking_the_landing:
        uncovered = {name: family for name, family in families.items() if name not in covered}
        correction = correction + path_entropy_correction(
            params, eps, uncovered, target.location_hessian, coupling.covered_locations(families)
        )
    elbo = log_joint + total_entropy(params, families)
    return elbo + correction - jax.lax.stop_gradient(correction), (elbo, local, latents)


def average_gradient_variance(per_sample_grads):
    """Average over all gradient components of their sample variance across the draws.

    The diagnostic of the paper's supplement (Figure "Performance of G-REP for different
    number of Monte Carlo samples"). ``per_sample_grads`` has a leading sample axis.
    """
    leaves = jax.tree_util.tree_leaves(per_sample_grads)
    total = sum(jnp.sum(jnp.var(leaf, axis=0, ddof=1)) for leaf in leaves)
    count = sum(leaf[0].size for leaf in leaves)
    return total / count


MAX_UNUSABLE_SHARE = 0.25  # the most draws of a step left out of its average (else: skipped)


def usable_draws(elbo, *per_draw):
    """Which draws (the leading axis of ``elbo`` and of every leaf of ``per_draw``) have a
    finite ELBO term and every floating component finite: a bool vector."""
    usable = jnp.isfinite(elbo)
    for leaf in (leaf for tree in per_draw for leaf in jax.tree_util.tree_leaves(tree)):
        if jnp.issubdtype(leaf.dtype, jnp.inexact) and leaf.ndim > 0:
            usable = usable & jnp.all(jnp.isfinite(jnp.reshape(leaf, (leaf.shape[0], -1))), axis=1)
    return usable


def mean_of_usable(tree, usable, kept):
    """The mean over the leading axis of every floating leaf of ``tree``: over the ``usable``
    draws where ``kept`` (a bool scalar), else over every draw. Every draw usable: ``sum /
    n``, bitwise ``jnp.mean``."""
    count = jnp.where(kept, jnp.sum(usable), usable.shape[0])

    def mean(leaf):
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.mean(leaf, 0)
        mask = jnp.reshape(usable | jnp.logical_not(kept), (-1,) + (1,) * (leaf.ndim - 1))
        return jnp.sum(jnp.where(mask, leaf, jnp.zeros((), leaf.dtype)), 0) / count.astype(leaf.dtype)

    return jax.tree_util.tree_map(mean, tree)


def _mean_of_draws(grads, info, compute_variance: bool, statistics=None):
    """The draws' mean gradient, ELBO (and statistics), without the draws where the model's
    density or its gradient is not finite, up to ``MAX_UNUSABLE_SHARE`` of them: draws in a
    corner of ``q`` where float32 overflows (a Weibull's ``(t / lambda)^k``) or where
    autodiff gives ``0 * inf`` (``jnp.where(c, log1p(-cdf), log_prob)`` with ``cdf`` rounded
    to 1 in the branch not taken). Left out, they do not void the step: a censored Weibull
    regression, whose every step held such a draw at the start, stalled on them. Where more
    are unusable, every draw is averaged: the step's mean is not finite and its guard skips
    it, as before (``q`` itself is where the model fails: the widened gradient, the halved
    step and the stall's error deal with that). ``extras["unusable_draws"]``: the fraction
    left out (0 where none was)."""
    usable = usable_draws(info.elbo, grads, statistics)
    unusable = jnp.sum(jnp.logical_not(usable))  # counted in integers: a float mean of ones is not 1
    kept = jnp.logical_and(unusable > 0, unusable <= int(MAX_UNUSABLE_SHARE * usable.shape[0]))
    share = unusable.astype(jnp.float32) / usable.shape[0]
    mean_grad = mean_of_usable(grads, usable, kept)
    extras = {key: jnp.mean(value, 0) for key, value in info.extras.items()}
    extras["unusable_draws"] = jnp.where(kept, share, 0.0)
    if compute_variance:
        extras["gradient_variance"] = average_gradient_variance(grads)
    info = EstimateInfo(elbo=mean_of_usable(info.elbo, usable, kept), extras=extras)
    if statistics is None:
        return mean_grad, info
    return mean_grad, info, mean_of_usable(statistics, usable, kept)


def multi_sample(single, num_samples: int, compute_variance: bool):
    """Averages a one-draw estimator over ``num_samples`` independent draws (those with a
    finite gradient: :func:`_mean_of_draws`)."""

    def estimate(rng_key, params, target):
        if num_samples == 1 and not compute_variance:
            return single(rng_key, params, target)
        keys = jax.random.split(rng_key, num_samples)
        grads, info = jax.vmap(single, in_axes=(0, None, None))(keys, params, target)
        return _mean_of_draws(grads, info, compute_variance and num_samples > 1)

    return estimate


def multi_sample_carried(single, num_samples: int, compute_variance: bool):
    """:func:`multi_sample` of a carried estimate ``single(rng_key, params, target, state) ->
    (grad, info, statistics)`` (:class:`~grepvi.estimators.base.CarriedState`): the same state
    for every draw, the draws' statistics averaged (over the draws kept for the gradient)."""

    def estimate(rng_key, params, target, state):
        if num_samples == 1 and not compute_variance:
            return single(rng_key, params, target, state)
        keys = jax.random.split(rng_key, num_samples)
        grads, info, statistics = jax.vmap(single, in_axes=(0, None, None, None))(keys, params, target, state)
        return _mean_of_draws(grads, info, compute_variance and num_samples > 1, statistics)

    return estimate


BASELINES = ("running", "means", "none")
CONTROL_VARIATES = ("none", "quadratic")


@register_estimator("grep")
def grep(
    num_samples: int = 1,
    compute_variance: bool = False,
    baseline: bool | str = True,
    sticking_the_landing: bool = True,
    control_variate: str = "none",
) -> Estimator:
    """G-REP by autodiff of the surrogate above, averaged over ``num_samples`` draws.

    ``baseline``: the control variate subtracted from ``f_i`` in ``g_corr`` (unbiased for each):

    * ``"running"`` (default, ``True``): ``f_i`` at the variational means plus the running
      average of the draws' offsets from it, shrunk by its noise (:class:`RunningBaseline`),
      carried by the step (``Estimator.carried``); where the step carries no state (minibatch
      and data-parallel steps, diagnostics), the means' value alone. Adam at 0.1, one draw a
      step, the same start, one process: the Olivetti DEF's window-median ELBO after 1,500
      steps -6.46e6 against -6.62e6 with the means' value (behind by up to 1.5% over the first
      300 steps, ahead from 400 on), MNIST's MF after 700 steps -7.27e5 against -8.11e5 (ahead
      from the first window); a step costs ~4% more (the averages' updates). On the textbook
      models the same steps or fewer (pumps 3,450 -> 3,350, 50 documents' Dirichlet counts
      3,750 -> 3,550, the horseshoe 4,250 -> 3,250). Unshrunk, the running offset lagged the
      natural gradient's early steps and lost it the trial on the horseshoe (200,000 Adam
      steps, 41 s, against 10 s);
    * ``"means"``: ``f_i`` at the variational means (:func:`baseline_log_joints`) always;
    * ``"none"`` (``False``): no baseline, the paper's plain estimator.

    ``sticking_the_landing``: the entropy gradient by its path derivative (Roeder et al. 2017;
    unbiased; default on): the Gaussian-based families' (:func:`path_entropy_correction`) and
    the gamma, beta and Dirichlet families' (:func:`standardized_entropy_path`, whose
    ``g_corr`` then weighs ``f_i - log q_i``). ``baseline=False, sticking_the_landing=False``
    is the paper's plain estimator.

    ``control_variate``: ``"quadratic"`` subtracts a quadratic expansion of the log joint about
    ``q``'s input means, fitted to past draws, and adds its exact expected gradient
    (:mod:`grepvi.estimators.quadratic_control_variate`) over the latents whose input moments
    are known (none covered: the default estimate); ``"none"`` (the default) does not.
    Opt-in: it helps strongly coupled small models and hurts others (the module's docstring).
    Needs ``baseline="running"`` (the expansion is fitted to past draws and carried with the
    baseline).
    """
    num_samples = positive_int(num_samples, "num_samples")
    stl = bool(sticking_the_landing)
    kind = ("running" if baseline else "none") if isinstance(baseline, bool) else baseline
    if kind not in BASELINES:
        raise ConfigError(f"baseline: expected True, False or one of {BASELINES}, got {baseline!r}")
    if control_variate not in CONTROL_VARIATES:
        raise ConfigError(f"control_variate: expected one of {CONTROL_VARIATES}, got {control_variate!r}")
    quadratic = control_variate == "quadratic"
    if quadratic and kind != "running":
        raise ConfigError(
            f"control_variate: 'quadratic' is fitted to past draws and needs the running baseline's "
            f"carried state (baseline='running'), got baseline={baseline!r}"
        )

    def single(rng_key, params, target, baseline_values=None):
        eps = sample_standardized(rng_key, params, target.families)
        grad, (elbo, local, _) = jax.grad(_surrogate_and_local, has_aux=True)(
            params, eps, target, baseline_values, stl
        )
        return grad, EstimateInfo(elbo=elbo, extras={}), local

    def single_expanded(rng_key, params, target, baseline_values, running):
        """One draw with the quadratic control variate; also what it tells the regression."""
        families, log_space = target.families, target.log_space
        eps = sample_standardized(rng_key, params, families)
        expansion = quadratic_control_variate.expansion(running, params, families, log_space)
        probe = {
            name: jnp.zeros(families[name].shape, jax.tree_util.tree_leaves(params[name])[0].dtype)
            for name in expansion.names
        }
        (grad, input_grad), (elbo, local, inputs) = jax.grad(
            _surrogate_and_local, argnums=(0, 6), has_aux=True
        )(params, eps, target, baseline_values, stl, expansion, probe)
        statistics = quadratic_control_variate.draw_statistics(
            expansion, input_grad, inputs, params, families, log_space
        )
        return grad, EstimateInfo(elbo=elbo, extras={}), local, statistics

    def estimate(rng_key, params, target):
        values = baseline_values(params, target, stl) if kind != "none" else None
        draw = lambda key, p, t: single(key, p, t, values)[:2]
        return multi_sample(draw, num_samples, compute_variance)(rng_key, params, target)

    def carried_draw(rng_key, params, target, state):
        at_means = baseline_values(params, target, stl)
        offsets = running_offsets(state)
        values = {name: at_means[name] + offsets[name] for name in at_means}
        grad, info, local = single(rng_key, params, target, values)
        return grad, info, {name: local[name] - at_means[name] for name in local}

    def expanded_draw(rng_key, params, target, state):
        baseline_state, running = state
        at_means = baseline_values(params, target, stl)
        offsets = running_offsets(baseline_state)
        values = {name: at_means[name] + offsets[name] for name in at_means}
        grad, info, local, statistics = single_expanded(rng_key, params, target, values, running)
        return grad, info, ({name: local[name] - at_means[name] for name in local}, statistics)

    def expanded_init(families, log_space=False):
        return init_running_baseline(families), quadratic_control_variate.init(families, log_space)

    def expanded_advance(state, statistics):
        return (
            advance_running_baseline(state[0], statistics[0]),
            quadratic_control_variate.advance(state[1], statistics[1]),
        )

    carried = None
    if quadratic:
        carried = CarriedState(
            init=expanded_init,
            estimate=multi_sample_carried(expanded_draw, num_samples, compute_variance),
            advance=expanded_advance,
        )
    elif kind == "running":
        carried = CarriedState(
            init=lambda families, log_space=False: init_running_baseline(families),
            estimate=multi_sample_carried(carried_draw, num_samples, compute_variance),
            advance=advance_running_baseline,
        )
    return Estimator(
        name="grep",
        estimate=estimate,
        options={
            "num_samples": num_samples,
            "compute_variance": compute_variance,
            "baseline": kind,
            "sticking_the_landing": stl,
            "control_variate": control_variate,
        },
        carried=carried,
    )

"""Coupled location steps: the natural gradient with the posterior's correlations between the
locations of the real-valued latents.

The mean-field natural gradient preconditions each element by its own Fisher information,
``delta mu_i = rho sigma_i^2 g_i``. The ELBO's Hessian in the locations ``mu`` of Gaussian
factors is ``E_q[grad^2 log p(z)]`` (``d^2/dmu_i dmu_j E_q[log p(mu + sigma eps)]``; the entropy
does not depend on ``mu``): not diagonal where the posterior couples the latents. In units of
``q``'s standard deviations it is ``R = S^(1/2) (-H) S^(1/2)`` (``S = diag(sigma^2)``), and the
mean-field step's relaxation time along an eigenvector of ``R`` is ``1 / (rho lambda)``. A
posterior that identifies only a combination of its latents has a tiny ``lambda``: two
intercepts whose sum the data fix (``lambda = 1.7e-4``), the logits of a softmax regression
that the data fix only up to a shift (``0.014``), a Poisson GLMM's intercept and its
non-centred row and column effects (``0.024``). There the averaged iterate drifts for
thousands of steps, and more draws per step do not stop it.

The coupled step is Newton's step on the locations,

    delta mu = rho K g,   K = D^(-1/2) C^{-1} D^(-1/2),   C = D^(-1/2) (-H) D^(-1/2),  D = diag(-H)

with ``C`` the correlation matrix of ``-H`` at ``q``'s means (its eigenvalues floored at
``EIGENVALUE_FLOOR``, so ``K`` is ``(-H)^{-1}`` with its flattest directions bounded). At the
mean-field optimum of a Gaussian posterior ``q``'s variances are ``D^{-1}``, and with ``C = I``
it is the mean-field natural step there. It was first scaled by ``q``'s own variances ``S``
in place of ``D^{-1}`` (``S^(1/2) C^{-1} S^(1/2)``); but ``S`` moves with every step's noisy
scale gradient (+-40% a window at one draw), and where ``C`` is ill-conditioned a small
mismatch between ``S`` and ``D^{-1}`` turns a ridge's long step into one along the stiffest
direction: a soft sum-to-zero constraint on 30 Gaussian effects (``C``'s eigenvalues 0.0036
to 30) fell from an ELBO of -84 to -16,304 in its first coupled window, and ran to the draws
cap; with ``K`` it converged in 8,950 iterations to its closed-form optimum. The trust region
is the block's second-order ELBO change, ``rho^2 g' K g / 2``, at most ``max_kl`` nats per
element of the block (a move along a flat direction of the ELBO costs little, so a ridge is
crossed in tens of steps, not thousands).

Where the locations are coupled, their gradient estimate also takes the log joint's Hessian
``H`` as its control variate (:func:`grepvi.estimators.grep.path_entropy_correction`): the
model's path derivative less ``H (z - mu)``, in place of sticking the landing's diagonal, whose
noise along a ridge (``(I - R) eps`` in units of ``sigma``) would leave the coupled step's
average an error of ``1 / lambda^2`` over the draws. The default procedure decides when
(:func:`grepvi.inference.controller._coupled_next`, :func:`grepvi.inference.fitting.location_coupler`).

Only the ``loc`` of real-valued Gaussian factors (:class:`~grepvi.families.normal.Normal`:
regression coefficients, intercepts, non-centred effects) and of ordered latents
(:func:`is_unconstrained_normal`) is coupled: for them the input of the model is ``mu + sigma
eps`` (an ordered latent's log-Jacobian is in its entropy, linear in ``u`` for an ordered vector).
The other latents keep their mean-field step.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.families.location_scale import LocationScale

__all__ = [
    "covered_locations",
    "coupling_size",
    "coupled_locations",
    "coupling_from_hessian",
    "location_hessian",
    "EIGENVALUE_FLOOR",
    "COUPLED_EIGENVALUE",
    "MAX_COUPLED_ELEMENTS",
]

EIGENVALUE_FLOOR = 1e-3  # C's eigenvalues below count as this: a step at most 1,000 times the mean-field one
COUPLED_EIGENVALUE = 0.1  # C's smallest eigenvalue below which the locations are coupled
INDEFINITE_EIGENVALUE = 0.01  # C's smallest eigenvalue below minus this: not concave there, no coupling
MAX_COUPLED_ELEMENTS = 256  # more located elements: no coupling (an n x n matrix per step)


def covered_locations(families: dict) -> tuple:
    """``((name, size), ...)``: the latents whose ``loc`` the coupled step covers, sorted by
    name: real-valued Gaussian factors (:class:`LocationScale` on the real line) and ordered
    latents (:func:`is_unconstrained_normal`)."""
    return tuple(
        (name, int(math.prod(getattr(family, "unconstrained_shape", family.shape))))
        for name, family in sorted(families.items())
        if (isinstance(family, LocationScale) and family.support == "real") or is_unconstrained_normal(family)
    )


def is_unconstrained_normal(family) -> bool:
    """An ordered :class:`~grepvi.families.transformed.TransformedNormal`: it reaches a log-space
    target as ``u = loc + scale * eps`` (its unconstrained draw), so its ``loc`` enters the
    model as a real-valued Gaussian factor's does; its log-Jacobian (linear in ``u`` for an
    ordered vector) is in the entropy. In the ordered parametrization the first element and
    the log-gaps are correlated (a Poisson mixture's rates: about 0.98), a ridge the
    mean-field step crosses slowly."""
    from grepvi.families.transformed import TransformedNormal

    return isinstance(family, TransformedNormal) and family.ordered


def coupling_size(families: dict) -> int:
    """How many location elements a coupled step covers (0 where fewer than two or more than
    ``MAX_COUPLED_ELEMENTS``: no coupling)."""
    n = sum(size for _, size in covered_locations(families))
    return n if 2 <= n <= MAX_COUPLED_ELEMENTS else 0


def _flat(tree: dict, covered: tuple) -> jax.Array:
    return jnp.concatenate([jnp.ravel(tree[name]) for name, _ in covered])


def _unflat(flat: jax.Array, covered: tuple, like: dict) -> dict:
    out, start = {}, 0
    for name, size in covered:
        out[name] = flat[start : start + size].reshape(jnp.shape(like[name])).astype(like[name].dtype)
        start += size
    return out


def coupled_locations(covered: tuple, params: dict, grad: dict, matrix, rho, max_kl):
    """``(delta loc per covered latent, shrunk)``: the coupled step of the covered locations
    (``grad``: the ELBO's ascent gradient; ``matrix``: ``K = D^(-1/2) C^{-1} D^(-1/2)`` of
    :func:`coupling_from_hessian`) and whether its trust region shrank it."""
    g = _flat({name: grad[name]["loc"] for name, _ in covered}, covered)
    g = jnp.where(jnp.isfinite(g), g, 0.0)
    coupled = matrix @ g
    quad = 0.5 * rho**2 * jnp.dot(g, coupled)
    budget = max_kl * g.size
    shrink = jnp.where(quad > budget, jnp.sqrt(budget / jnp.maximum(quad, 1e-30)), 1.0)
    delta = rho * shrink * coupled
    locs = {name: params[name]["loc"] for name, _ in covered}
    return _unflat(delta, covered, locs), shrink < 1.0


def coupling_from_hessian(hessian, floor: float = EIGENVALUE_FLOOR, threshold: float = COUPLED_EIGENVALUE):
    """``(K as float32, smallest eigenvalue of C)`` from the log joint's Hessian in the
    covered locations (host arrays, float64), or ``(None, smallest)`` where the locations are
    not coupled enough to need it (smallest eigenvalue at least ``threshold``) or the Hessian
    does not serve (not finite, a non-negative diagonal or an eigenvalue of ``C`` below
    ``-INDEFINITE_EIGENVALUE``: not concave there; above it, rounding of a flat direction)."""
    h = -np.asarray(hessian, np.float64)
    h = 0.5 * (h + h.T)
    diagonal = np.diag(h)
    if not np.all(np.isfinite(h)) or not np.all(diagonal > 0):
        return None, math.nan
    scale = 1.0 / np.sqrt(diagonal)
    correlation = h * np.outer(scale, scale)
    values, vectors = np.linalg.eigh(correlation)
    smallest = float(values[0])
    if smallest >= threshold or smallest < -INDEFINITE_EIGENVALUE:
        # indefinite: the log joint curves up along a direction there (a funnel's neck);
        # floored, that direction would take a thousandfold step
        return None, smallest
    inverse = (vectors / np.maximum(values, floor)) @ vectors.T
    inverse = inverse * np.outer(scale, scale)  # K = D^(-1/2) C^{-1} D^(-1/2): (-H)^{-1}, floored
    return np.asarray(0.5 * (inverse + inverse.T), np.float32), smallest


def location_hessian(target, covered: tuple):
    """A jitted ``(params, data) -> Hessian`` of the target's log joint in the covered
    locations, the other latents at their means (``data`` ignored unless the target takes it)."""
    from grepvi.target import bind_data, inputs_at_means

    families = target.families

    def hessian(params, data):
        bound = bind_data(target, data) if target.takes_data else target
        point = inputs_at_means(params, families, target.log_space)
        locs = {name: params[name]["loc"] for name, _ in covered}

        def log_joint(flat):
            return bound.logdensity_fn({**point, **_unflat(flat, covered, locs)})

        return jax.hessian(log_joint)(_flat(locs, covered).astype(jnp.float32))

    return jax.jit(hessian)

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

with ``H = E_q[d^2 log p / d u^2]`` (:func:`location_hessian`, over ``HESSIAN_DRAWS`` draws of
``q``) and ``C`` the correlation matrix of ``-H`` (its eigenvalues floored at
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

Covered are the ``loc`` of real-valued Gaussian factors (:class:`~grepvi.families.normal.Normal`:
regression coefficients, intercepts, non-centred effects) and of ordered latents
(:func:`is_unconstrained_normal`): for them the input of the model is ``mu + sigma eps`` (an
ordered latent's log-Jacobian is in its entropy, linear in ``u`` for an ordered vector); and
the log-mean of gamma factors (:func:`is_gamma`): ``log z = log m + f(alpha, eps)``, so ``log
m`` enters ``log z`` as a location does, the gamma's entropy is linear in it, and its gradient
takes the same control variate (``H (log z - E log z)``, the sticking-the-landing path through
``log m`` left out). An SIR epidemic's transmission and recovery rates (a NUTS correlation of
0.963 on the log scale) stopped unconverged on three of five seeds uncoupled (10-22 s);
coupled, five of five converged in 3.6-7.9 s. A gamma that scales other latents (a funnel) is left to its
mean-field step (:func:`coupling_with_funnels`), and a coupling whose rerun of the first stage
does not cut its error 1.6-fold is dropped (:func:`grepvi.inference.controller._coupling_helped`).
The other latents keep their mean-field step.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.families.location_scale import LocationScale

__all__ = [
    "covered_locations",
    "is_gamma",
    "location",
    "location_gradient",
    "location_update",
    "location_key",
    "coupling_size",
    "coupled_locations",
    "coupling_from_hessian",
    "location_hessian",
    "location_draw",
    "coupling_with_funnels",
    "expected_hessian",
    "finite_draws",
    "known_eigenvalues",
    "coupled_pieces",
    "location_shape",
    "EIGENVALUE_FLOOR",
    "KNOWN_CURVATURE",
    "KNOWN_EIGENVALUE_FLOOR",
    "SLOW_RELAXATION",
    "COUPLED_EIGENVALUE",
    "GAMMA_COUPLED_EIGENVALUE",
    "MAX_COUPLED_ELEMENTS",
]

EIGENVALUE_FLOOR = 1e-3  # C's eigenvalues below count as this: a step at most 1,000 times the mean-field one
# ... unless the draws' Hessians know the direction's curvature (positive and KNOWN_CURVATURE
# times its spread over q's draws) and the floor would slow its relaxation more than
# SLOW_RELAXATION times (three batches of 10 / rho steps; the eigenvalue under EIGENVALUE_FLOOR
# / SLOW_RELAXATION); then it counts as itself, down to float32's limit (K's rounding, 6e-8 of
# its largest entry, is 6% of a stiff direction's step at 1 / 1e-6)
KNOWN_CURVATURE = 10.0
SLOW_RELAXATION = 30.0
KNOWN_EIGENVALUE_FLOOR = 1e-6
# C's smallest eigenvalue below which a block with a gamma's log-mean is coupled: the models
# whose smallest eigenvalue lay in 0.05-0.1 with their gammas in the block (seeds 0.073, three
# clusters 0.085, random slopes 0.087, measurement error 0.060, local level, frailty, gamma
# shape, regularized-horseshoe logistic 0.09-0.1) ran 1.2-1.9 times the iterations coupled that
# they ran uncoupled (seeds 4,650 against 2,950). A Poisson mixture's ordered rates (0.06, no
# gamma) converge coupled in 3,775 iterations and ran uncoupled to the draws cap: a block of
# Gaussian locations alone keeps 0.1.
GAMMA_COUPLED_EIGENVALUE = 0.05
COUPLED_EIGENVALUE = 0.1  # the same for a block of Gaussian locations alone (thirty-fifth session)
INDEFINITE_EIGENVALUE = 0.01  # C's smallest eigenvalue below minus this: not concave there, no coupling
MAX_COUPLED_ELEMENTS = 256  # more located elements: no coupling (an n x n matrix per step)
HESSIAN_DRAWS = 16  # draws of q over which the ELBO's Hessian in the locations is averaged
HESSIAN_SEED = 0  # their key: a fixed one (a resumed run computes the same H)


def covered_locations(families: dict) -> tuple:
    """``((name, size), ...)``: the latents whose location the coupled step covers, sorted by
    name: real-valued Gaussian factors (:class:`LocationScale` on the real line) and ordered
    latents (:func:`is_unconstrained_normal`), their ``loc``; and gamma factors
    (:func:`is_gamma`), their log-mean, where the block stays within
    ``MAX_COUPLED_ELEMENTS`` with them (else the Gaussian part alone)."""
    gaussian = tuple(
        (name, int(math.prod(getattr(family, "unconstrained_shape", family.shape))))
        for name, family in sorted(families.items())
        if (isinstance(family, LocationScale) and family.support == "real") or is_unconstrained_normal(family)
    )
    gammas = tuple(
        (name, int(math.prod(family.shape))) for name, family in sorted(families.items()) if is_gamma(family)
    )
    if sum(size for _, size in gaussian + gammas) > MAX_COUPLED_ELEMENTS:
        return gaussian
    return tuple(sorted(gaussian + gammas))


def is_gamma(family) -> bool:
    """A :class:`~grepvi.families.gamma.Gamma` factor (not placed by an affine map): its draw is
    ``log z = log m + f(alpha, eps)`` (``m`` its mean, ``alpha`` its shape), so its log-mean
    enters a log-space target as a Gaussian's location does, and the entropy is linear in it.
    The ELBO's Hessian in the log-means is ``E_q[d^2 log p / d (log z)^2]``, and the gamma's
    Fisher information in ``log m`` is ``alpha`` (shape and mean are orthogonal): the growth
    rate of an epidemic curve fixes ``beta - gamma`` on the log scale (a posterior correlation
    of 0.963 under NUTS), a ridge the mean-field step crosses slowly."""
    from grepvi.families.gamma import Gamma

    return type(family) is Gamma


def location_key(family) -> str:
    """The parameter a covered latent's location is stored in (``"loc"``; a gamma's ``"mean"``)."""
    return "mean" if is_gamma(family) else "loc"


def location(family, params) -> jax.Array:
    """The covered location: ``loc``, or a gamma's log-mean ``log m``."""
    if is_gamma(family):
        return jnp.log(family.mean(params))
    return params["loc"]


def location_gradient(family, params, grad) -> jax.Array:
    """The gradient in the covered location from the gradient in the stored parameters: a
    gamma's ``m = floor + softplus(v)``, ``d log m / d v = sigmoid(v) / m``."""
    if is_gamma(family):
        return grad["mean"] * family.mean(params) / jax.nn.sigmoid(params["mean"])
    return grad["loc"]


def location_update(family, params, delta) -> jax.Array:
    """The update of the stored parameter that moves the covered location by ``delta``
    (exactly: a gamma's mean times ``exp(delta)``)."""
    if not is_gamma(family):
        return delta
    from grepvi import numerics

    v = params["mean"]
    target = family.mean(params) * jnp.exp(delta) - family.min_mean
    target = jnp.maximum(target, jnp.finfo(v.dtype).tiny)
    return (numerics.inverse_softplus(target) - v).astype(v.dtype)


def location_shape(family) -> tuple:
    """The shape of a covered latent's location (an ordered latent's unconstrained shape)."""
    return tuple(getattr(family, "unconstrained_shape", family.shape))


def coupled_pieces(on, covered: tuple, families: dict) -> dict:
    """``on`` (one flag for the block or one per covered element) as each covered latent's
    flags, in its location's shape."""
    size = sum(n for _, n in covered)
    on = jnp.broadcast_to(jnp.asarray(on), (size,))
    pieces, start = {}, 0
    for name, n in covered:
        pieces[name] = on[start : start + n].reshape(location_shape(families[name]))
        start += n
    return pieces


def location_input(family, u, log_space: bool) -> jax.Array:
    """What the target takes for a covered latent at location ``u`` (``exp(u)`` for a gamma
    in a value-space target)."""
    if is_gamma(family) and not log_space:
        return family.value_from_log_space(u)
    return u


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


def coupled_locations(
    covered: tuple, families: dict, params: dict, grad: dict, matrix, rho, max_kl, max_log_change
):
    """``(update of each covered latent's location parameter, shrunk)``: the coupled step of
    the covered locations (``grad``: the ELBO's ascent gradient in the stored parameters;
    ``matrix``: ``K = D^(-1/2) C^{-1} D^(-1/2)`` of :func:`coupling_from_hessian`) and whether
    its trust region shrank it. A gamma's log-mean moves by at most ``max_log_change`` (the
    block is shrunk as one: the step's direction is kept)."""
    g = jnp.concatenate(
        [jnp.ravel(location_gradient(families[name], params[name], grad[name])) for name, _ in covered]
    )
    g = jnp.where(jnp.isfinite(g), g, 0.0)
    coupled = matrix @ g
    quad = 0.5 * rho**2 * jnp.dot(g, coupled)
    budget = max_kl * g.size
    shrink = jnp.where(quad > budget, jnp.sqrt(budget / jnp.maximum(quad, 1e-30)), 1.0)
    logged = np.concatenate([np.full(size, is_gamma(families[name])) for name, size in covered])
    if logged.any():
        largest = jnp.max(jnp.where(logged, jnp.abs(rho * shrink * coupled), 0.0))
        shrink = shrink * jnp.where(
            largest > max_log_change, max_log_change / jnp.maximum(largest, 1e-30), 1.0
        )
    delta = rho * shrink * coupled
    updates, start = {}, 0
    for name, size in covered:
        family, stored = families[name], params[name][location_key(families[name])]
        piece = delta[start : start + size].reshape(jnp.shape(stored)).astype(stored.dtype)
        updates[name] = location_update(family, params[name], piece)
        start += size
    return updates, shrink < 1.0


def coupling_from_hessian(
    hessian, floor: float = EIGENVALUE_FLOOR, threshold: float = COUPLED_EIGENVALUE, draws=None
):
    """``(K as float32, smallest eigenvalue of C)`` from the log joint's Hessian in the
    covered locations (host arrays, float64), or ``(None, smallest)`` where the locations are
    not coupled enough to need it (smallest eigenvalue at least ``threshold``) or the Hessian
    does not serve (not finite, a non-negative diagonal or an eigenvalue of ``C`` below
    ``-INDEFINITE_EIGENVALUE``: not concave there; above it, rounding of a flat direction).

    ``C``'s eigenvalues below ``floor`` count as ``floor`` (along such an eigenvector the step
    relaxes ``floor / lambda`` times slower than Newton's), except, with ``draws`` (the
    finite draws' Hessians of which ``hessian`` is the mean, ``(draws, n, n)``), along an
    eigenvector whose curvature the draws agree on (:func:`known_eigenvalues`) and whose
    eigenvalue is under ``floor / SLOW_RELAXATION`` (floored, it would relax over more than
    three batches of ``10 / rho`` steps): there the eigenvalue counts as itself, down to
    ``KNOWN_EIGENVALUE_FLOOR``. A regression on the raw calendar year (intercept and slope
    correlated at -0.99999, an eigenvalue of 1.0e-5 on which every draw agrees: a Gaussian log
    joint's Hessian is the same at every draw) crossed its ridge 97 times too slowly at the
    floor and stopped ``drifting`` 0.14 marginal sd from the optimum. Not above ``floor /
    SLOW_RELAXATION``: where the floor slows a direction a few times the stages average over
    it, and its own eigenvalue cost iterations: a BYM2 disease map's 4.5e-4 (spread 1.1e-5)
    took 1.6 times the iterations at five of seeds 0-5 (10,425-12,450 against 6,425-8,950) to
    the same answers, a log-Gaussian Cox process's 8.6e-5 (spread 6.5e-7; 12 times slower
    floored) 1.5-1.6 times at two of seeds 0-3 (64,350 against 39,250; 74,150 against 50,450).
    Not where the draws disagree: an age-period mortality
    model's flattest eigenvalues are -1.8e-4 and -7e-6 (not concave; spread 1.1e-4 and
    3.4e-6), a factor model's -7e-4 (spread 3.4e-3)."""
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
    floors = np.full_like(values, floor)
    if draws is not None:
        known = known_eigenvalues(draws, scale, values, vectors) & (values < floor / SLOW_RELAXATION)
        floors = np.where(known, np.minimum(floor, KNOWN_EIGENVALUE_FLOOR), floors)
    inverse = (vectors / np.maximum(values, floors)) @ vectors.T
    inverse = inverse * np.outer(scale, scale)  # K = D^(-1/2) C^{-1} D^(-1/2): (-H)^{-1}, floored
    return np.asarray(0.5 * (inverse + inverse.T), np.float32), smallest


def known_eigenvalues(draws, scale, values, vectors) -> np.ndarray:
    """Per eigenvector of ``C`` (``vectors``' columns, eigenvalues ``values``; ``C = diag(scale)
    (-H) diag(scale)``): whether the draws' Hessians ``draws`` agree on its curvature, which is
    positive and ``KNOWN_CURVATURE`` times its standard deviation over the draws or more (a
    curvature that changes across ``q``'s draws is the model's, not a quadratic's: a Newton step
    trusting its mean overshoots where the draws reach)."""
    draws = np.asarray(draws, np.float64)
    if draws.shape[0] < 2:
        return np.zeros(values.shape, bool)
    each = -0.5 * (draws + np.swapaxes(draws, 1, 2)) * np.outer(scale, scale)
    curvature = np.einsum("in,kij,jn->kn", vectors, each, vectors)  # per draw, per eigenvector
    spread = curvature.std(axis=0, ddof=1)
    return (values > 0.0) & (values >= KNOWN_CURVATURE * spread)


def location_draw(family, params, eps) -> jax.Array:
    """A covered latent's draw in its location's coordinate: ``loc + scale eps``, or a gamma's
    ``log z``."""
    if is_gamma(family):
        return family.log_transform(params, eps)
    natural = family.natural_params(params)
    return natural["loc"] + natural["scale"] * eps


def expected_hessian(each) -> tuple:
    """``(H, share)`` from the draws' Hessians ``each`` (``(draws, n, n)``, host arrays): their
    mean over the finite ones (nan where none is), and per element the share of the finite
    draws in which its row is not concave: its own curvature not negative, or a ``2 x 2``
    minor with another element indefinite (``h_ij^2 > h_ii h_jj``, which holds too where the
    other's curvature is not negative)."""
    n = np.shape(each)[-1]
    finite = finite_draws(each)
    if not finite.shape[0]:
        return np.full((n, n), np.nan), np.ones(n)
    good = 0.5 * (finite + np.swapaxes(finite, 1, 2))
    curvature = -np.diagonal(good, axis1=1, axis2=2)
    minors = np.square(good) > curvature[:, :, None] * curvature[:, None, :]
    minors[:, np.arange(n), np.arange(n)] = False
    rows = minors.any(axis=2) | ~(curvature > 0)
    return good.mean(axis=0), rows.mean(axis=0)


FUNNEL_SHARE = 0.5  # a gamma whose row is not concave in more of the draws' Hessians: not coupled


def finite_draws(each) -> np.ndarray:
    """The finite ones of the draws' Hessians ``each`` (host, float64): those
    :func:`expected_hessian` averages."""
    each = np.asarray(each, np.float64)
    return each[np.all(np.isfinite(each), axis=(1, 2))]


def coupling_with_funnels(hessian, indefinite_share, covered: tuple, families: dict, draws=None):
    """``(K, H, mask)`` of :func:`coupling_from_hessian` over the covered elements that are
    coupled (``mask``; ``K`` and ``H`` zero in the others' rows and columns), or
    ``(None, None, None)``. ``draws``: the finite draws' Hessians (:func:`finite_draws`), for
    the eigenvalues they know (:func:`coupling_from_hessian`).

    A gamma whose row of the log joint's Hessian is not concave in more than ``FUNNEL_SHARE``
    of ``q``'s draws is left to its mean-field step: a scale of other latents (a hierarchy's
    ``tau``, a horseshoe's ``lambda`` and ``tau``: ``log p`` holds ``-(theta - mu)^2 / (2
    tau^2)``, whose cross-curvature with ``theta`` changes sign with ``theta - mu``) is a
    funnel, along which the expected Hessian is a poor model: coupled with its ``z`` and
    ``lambda``, a horseshoe regression ran seven stages to the draws cap (26,150 iterations,
    94 s) where uncoupled it stopped after 4,150 (7 s); its gammas' rows are not concave in
    88-100% of the draws (:func:`expected_hessian`). An epidemic's transmission and recovery
    rates are in 12%, the gamma-Poisson's concentration and rate and a Lotka-Volterra
    system's rates in none."""
    share = np.asarray(indefinite_share, np.float64).ravel()
    gamma = np.concatenate([np.full(size, is_gamma(families[name])) for name, size in covered])
    keep = ~(gamma & (share > FUNNEL_SHARE))
    if keep.sum() < 2:
        return None, None, None
    h = np.asarray(hessian, np.float64)
    sub = h[np.ix_(keep, keep)]
    threshold = GAMMA_COUPLED_EIGENVALUE if np.any(gamma & keep) else COUPLED_EIGENVALUE
    sub_draws = None if draws is None else np.asarray(draws)[:, keep][:, :, keep]
    matrix, _ = coupling_from_hessian(sub, threshold=threshold, draws=sub_draws)
    if matrix is None:
        return None, None, None
    full_k = np.zeros_like(h, np.float32)
    full_h = np.zeros_like(h)
    full_k[np.ix_(keep, keep)] = matrix
    full_h[np.ix_(keep, keep)] = 0.5 * (sub + sub.T)
    return full_k, full_h, keep


def location_hessian(
    target, covered: tuple, draws: int = HESSIAN_DRAWS, compiler_options: dict | None = None
):
    """A ``(params, data) -> (draws, n, n)`` host array: Hessians of the target's log joint in the
    covered locations (:func:`location`: a gamma's log-mean, through ``log z``) at ``draws``
    draws of the covered latents in their locations' coordinates, whose mean estimates the
    ELBO's Hessian there, ``E_q[d^2 log p / d u^2]`` (:func:`expected_hessian`). A draw is
    ``location + spread eps`` with ``eps`` standard normal (a Gaussian's own draw; for a gamma
    ``log z``'s mean and standard deviation, ``psi(alpha) - log beta`` and
    ``sqrt(psi_1(alpha))``, a log-normal stand-in for the gamma, whose rejection sampler would
    compile into the program); the other latents at their means; the normals drawn once on the
    host from ``HESSIAN_SEED`` (the same ``H`` for the same ``q``: a resumed run's); ``data``
    ignored unless the target takes it.

    The Hessian at ``q``'s means misses the curvature that ``q``'s spread adds: in the
    centred eight schools the log joint's curvature in ``log tau`` is ``-2 S / tau^2`` with
    ``S = sum (theta - mu)^2``, 2.2 at the means against 15.3 in expectation (``S`` at the
    means leaves out the thetas' variances); coupled by it, the fit ran to the draws cap
    where uncoupled it converged (with the expectation ``C``'s smallest eigenvalue is 0.16:
    not coupled).

    ``compiler_options``: XLA options of the draw's program
    (:func:`grepvi.inference.compilation_cache.hessian_compiler_options`); the default is
    XLA's."""
    from grepvi.target import bind_data, inputs_at_means

    families = target.families

    @functools.partial(jax.jit, compiler_options=compiler_options)
    def at_draw(params, data, eps):
        bound = bind_data(target, data) if target.takes_data else target
        locs = {name: location(families[name], params[name]) for name, _ in covered}
        point = inputs_at_means(params, families, target.log_space)
        at = {name: location_draw(families[name], params[name], eps[name]) for name, _ in covered}

        def log_joint(flat):
            moved = _unflat(flat, covered, locs)
            inputs = {name: location_input(families[name], moved[name], target.log_space) for name in moved}
            return bound.logdensity_fn({**point, **inputs})

        return jax.hessian(log_joint)(_flat(at, covered).astype(jnp.float32))

    # standard normal draws made once on the host: no random-bit generator in the program
    rng = np.random.default_rng(HESSIAN_SEED)
    draws_eps = [
        {name: rng.standard_normal(location_shape(families[name])).astype(np.float32) for name, _ in covered}
        for _ in range(draws)
    ]

    def hessian(params, data):
        # one program for one draw, called once a draw: it compiles as the Hessian at one point
        # does (the draws as a loop inside one program, their normals from a key, took its
        # compilation from 0.1-0.8 s to 1.1-2.5 s; a horseshoe's first stage waited 2.2 s for it)
        return np.stack([np.asarray(at_draw(params, data, eps)) for eps in draws_eps])

    return hessian

"""Conjugate models with exact ELBO gradients, and the Monte Carlo unbiasedness check.

Every estimator in grepvi is tested the same way (``tests/test_estimators_unbiased.py``):
the mean of many gradient draws must equal the exact gradient of the ELBO within a few Monte
Carlo standard errors. Users who register their own estimator can run the same check.

Each :class:`ConjugateModel` gives the log joint (data bound), the variational families, the
exact posterior parameters, and ``exact_elbo(params)``: the ELBO in closed form (expected log
joint under ``q`` plus entropy), whose ``jax.grad`` is the exact gradient.
"""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln

from grepvi import numerics
from grepvi.families import Beta, Dirichlet, Gamma, GeneralizedDirichlet, LogNormal
from grepvi.families.base import Family

__all__ = [
    "ConjugateModel",
    "gamma_poisson",
    "beta_bernoulli",
    "lognormal_normal",
    "dirichlet_multinomial",
    "generalized_dirichlet_multinomial",
    "GradientCheck",
    "gradient_draws",
    "check_unbiased",
    "LocalCheck",
    "check_local_log_joints",
]


class ConjugateModel(NamedTuple):
    name: str
    logdensity_fn: Callable
    local_logdensity_fn: Callable
    families: dict[str, Family]
    exact_elbo: Callable  # params -> ELBO (closed form)
    posterior: dict  # exact posterior's natural parameters, per latent
    posterior_mean: dict
    posterior_variance: dict
    log_space: bool = False  # the log joints take log z / logit z (Target.log_space)


def gamma_poisson(
    counts=(3.0, 5.0, 4.0, 0.0, 1.0),
    prior_shape=0.1,
    prior_rate=0.3,
    shape=(),
    log_space=False,
    **family_options,
):
    """``z ~ Gamma(a0, b0)``, ``x_i ~ Poisson(z)``: posterior ``Gamma(a0 + sum x, b0 + n)``.

    With ``shape`` non-empty, independent copies (one rate per element) share the data.
    ``log_space``: the log joints take ``log z``.
    """
    counts = jnp.asarray(counts, jnp.float32)
    n, total = counts.shape[0], jnp.sum(counts)

    def local(z):
        log_rate = z["rate"] if log_space else jnp.log(z["rate"])
        rate = jnp.exp(log_rate) if log_space else z["rate"]
        return {"rate": (prior_shape - 1.0 + total) * log_rate - (prior_rate + n) * rate}

    def logdensity_fn(z):
        return jnp.sum(local(z)["rate"])

    family = Gamma(shape=shape, **family_options)

    def exact_elbo(params):
        p = params["rate"]
        natural = family.natural_params(p)
        a, b = natural["concentration"], natural["rate"]
        expected_log = digamma(a) - jnp.log(b)
        expected = a / b
        value = (prior_shape - 1.0 + total) * expected_log - (prior_rate + n) * expected
        return jnp.sum(value + family.entropy(p))

    post_a, post_b = prior_shape + float(total), prior_rate + n
    full = lambda v: np.full(shape, v, np.float64)
    return ConjugateModel(
        "gamma-poisson",
        logdensity_fn,
        local,
        {"rate": family},
        exact_elbo,
        {"rate": {"concentration": full(post_a), "rate": full(post_b)}},
        {"rate": full(post_a / post_b)},
        {"rate": full(post_a / post_b**2)},
        log_space=bool(log_space),
    )


def beta_bernoulli(
    outcomes=(1.0, 0.0, 1.0, 1.0, 0.0, 1.0),
    prior_a=1.0,
    prior_b=1.0,
    shape=(),
    log_space=False,
    **family_options,
):
    """``z ~ Beta(a0, b0)``, ``x_i ~ Bernoulli(z)``: posterior ``Beta(a0 + s, b0 + n - s)``.

    ``log_space``: the log joints take ``u = logit z`` (``log z = log_sigmoid(u)``,
    ``log(1 - z) = log_sigmoid(-u)``, exact however close ``z`` is to 0 or 1)."""
    outcomes = jnp.asarray(outcomes, jnp.float32)
    n, s = outcomes.shape[0], float(jnp.sum(outcomes))

    def local(z):
        if log_space:
            log_p, log_1mp = jax.nn.log_sigmoid(z["prob"]), jax.nn.log_sigmoid(-z["prob"])
        else:
            log_p, log_1mp = jnp.log(z["prob"]), jnp.log1p(-z["prob"])
        return {"prob": (prior_a - 1.0 + s) * log_p + (prior_b - 1.0 + n - s) * log_1mp}

    def logdensity_fn(z):
        return jnp.sum(local(z)["prob"])

    family = Beta(shape=shape, **family_options)

    def exact_elbo(params):
        p = params["prob"]
        natural = family.natural_params(p)
        a, b = natural["concentration1"], natural["concentration0"]
        log_z = digamma(a) - digamma(a + b)
        log_1mz = digamma(b) - digamma(a + b)
        value = (prior_a - 1.0 + s) * log_z + (prior_b - 1.0 + n - s) * log_1mz
        return jnp.sum(value + family.entropy(p))

    post_a, post_b = prior_a + s, prior_b + n - s
    full = lambda v: np.full(shape, v, np.float64)
    total = post_a + post_b
    return ConjugateModel(
        "beta-bernoulli",
        logdensity_fn,
        local,
        {"prob": family},
        exact_elbo,
        {"prob": {"concentration1": full(post_a), "concentration0": full(post_b)}},
        {"prob": full(post_a / total)},
        {"prob": full(post_a * post_b / (total**2 * (total + 1.0)))},
        log_space=bool(log_space),
    )


def lognormal_normal(
    observations=(0.3, -0.2, 0.8, 0.5),
    prior_loc=0.0,
    prior_scale=1.0,
    noise_scale=0.5,
    shape=(),
    log_space=False,
    **family_options,
):
    """``log z ~ Normal(m0, s0^2)``, ``y_i ~ Normal(log z, s^2)``: the posterior of ``z`` is
    log-normal with precision ``1/s0^2 + n/s^2``. The log joint includes the Jacobian term
    ``-log z`` of the prior density on ``z``."""
    y = jnp.asarray(observations, jnp.float32)
    n, total = y.shape[0], float(jnp.sum(y))
    precision = 1.0 / prior_scale**2 + n / noise_scale**2
    post_loc = (prior_loc / prior_scale**2 + total / noise_scale**2) / precision
    post_scale = precision**-0.5

    def local(z):
        log_z = z["scale"] if log_space else jnp.log(z["scale"])
        prior = -0.5 * ((log_z - prior_loc) / prior_scale) ** 2 - log_z
        likelihood = -0.5 * (n * log_z**2 - 2.0 * total * log_z) / noise_scale**2
        return {"scale": prior + likelihood}

    def logdensity_fn(z):
        return jnp.sum(local(z)["scale"])

    family = LogNormal(shape=shape, **family_options)

    def exact_elbo(params):
        p = params["scale"]
        m, s = p["loc"], numerics.softplus(p["scale"])
        e_log, e_log2 = m, m**2 + s**2
        prior = -0.5 * (e_log2 - 2 * prior_loc * e_log + prior_loc**2) / prior_scale**2 - e_log
        likelihood = -0.5 * (n * e_log2 - 2.0 * total * e_log) / noise_scale**2
        return jnp.sum(prior + likelihood + family.entropy(p))

    full = lambda v: np.full(shape, v, np.float64)
    return ConjugateModel(
        "lognormal-normal",
        logdensity_fn,
        local,
        {"scale": family},
        exact_elbo,
        {"scale": {"loc": full(post_loc), "scale": full(post_scale)}},
        {"scale": full(np.exp(post_loc + post_scale**2 / 2))},
        {"scale": full(np.expm1(post_scale**2) * np.exp(2 * post_loc + post_scale**2))},
        log_space=bool(log_space),
    )


def dirichlet_multinomial(
    counts=(3.0, 0.0, 5.0, 1.0), prior_concentration=0.5, batch_shape=(), log_space=False, **family_options
):
    """``z ~ Dirichlet(a0)``, ``x ~ Multinomial(z)``: posterior ``Dirichlet(a0 + x)``.

    ``log_space``: the log joints take ``log z``."""
    counts = jnp.asarray(counts, jnp.float32)
    k = counts.shape[0]

    def local(z):
        log_z = z["probs"] if log_space else jnp.log(z["probs"])
        return {"probs": jnp.sum((prior_concentration - 1.0 + counts) * log_z, -1)}

    def logdensity_fn(z):
        return jnp.sum(local(z)["probs"])

    family = Dirichlet(shape=tuple(batch_shape) + (k,), **family_options)

    def exact_elbo(params):
        p = params["probs"]
        alpha = numerics.softplus(p["concentration"])
        expected_log = digamma(alpha) - digamma(jnp.sum(alpha, -1, keepdims=True))
        value = jnp.sum((prior_concentration - 1.0 + counts) * expected_log, -1)
        return jnp.sum(value + family.entropy(p))

    post = np.broadcast_to(prior_concentration + np.asarray(counts, np.float64), family.shape)
    total = post.sum(-1, keepdims=True)
    return ConjugateModel(
        "dirichlet-multinomial",
        logdensity_fn,
        local,
        {"probs": family},
        exact_elbo,
        {"probs": {"concentration": post}},
        {"probs": post / total},
        {"probs": post * (total - post) / (total**2 * (total + 1.0))},
        log_space=bool(log_space),
    )


def generalized_dirichlet_multinomial(
    counts=(3.0, 0.0, 5.0, 1.0), prior_concentration=0.5, batch_shape=(), log_space=False
):
    """:func:`dirichlet_multinomial` with a :class:`~grepvi.GeneralizedDirichlet` ``q``: the
    posterior ``Dirichlet(a0 + x)`` is its member ``a_k = a0 + x_k``, ``b_k = sum_{j>k} (a0 +
    x_j)``. ``E_q[log z_k] = psi(a_k) - psi(a_k + b_k) + sum_{j<k} (psi(b_j) - psi(a_j +
    b_j))`` (the last component: the sum alone) gives the exact ELBO."""
    counts = jnp.asarray(counts, jnp.float32)
    k = counts.shape[0]
    conjugate = dirichlet_multinomial(counts, prior_concentration, batch_shape, log_space)
    family = GeneralizedDirichlet(shape=tuple(batch_shape) + (k,))

    def exact_elbo(params):
        p = params["probs"]
        natural = family.natural_params(p)
        a, b = natural["concentration1"], natural["concentration0"]
        expected_log_z = digamma(a) - digamma(a + b)
        expected_log_rest = digamma(b) - digamma(a + b)
        before = jnp.cumsum(expected_log_rest, -1)
        expected_log = jnp.concatenate([expected_log_z + before - expected_log_rest, before[..., -1:]], -1)
        value = jnp.sum((prior_concentration - 1.0 + counts) * expected_log, -1)
        return jnp.sum(value + family.entropy(p))

    post = np.broadcast_to(prior_concentration + np.asarray(counts, np.float64), family.shape)
    after = np.cumsum(post[..., ::-1], -1)[..., ::-1][..., 1:]  # sum_{j>k} post_j
    return conjugate._replace(
        name="generalized-dirichlet-multinomial",
        families={"probs": family},
        exact_elbo=exact_elbo,
        posterior={"probs": {"concentration1": post[..., :-1], "concentration0": after}},
    )


del gammaln


class GradientCheck(NamedTuple):
    """Monte Carlo mean, standard error and exact value of every gradient component."""

    mean: np.ndarray
    standard_error: np.ndarray
    exact: np.ndarray
    variance: np.ndarray  # per-draw variance of each component

    @property
    def z_scores(self) -> np.ndarray:
        return (self.mean - self.exact) / np.maximum(self.standard_error, 1e-30)

    def max_abs_z(self) -> float:
        return float(np.max(np.abs(self.z_scores)))


def _flatten(tree):
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree_util.tree_leaves(tree)])


def gradient_draws(
    estimator,
    target,
    params,
    rng_key,
    num_draws: int,
    batch_size: int = 10_000,
    data=None,
    compiler_options=None,
):
    """``num_draws`` independent one-call gradient estimates, flattened, float64 (draws x dims).

    ``data``: the data pytree of a target with ``takes_data`` (e.g. ``model.target()``).
    ``compiler_options``: XLA options of the batch's program (``jax.jit``'s)."""
    from grepvi.target import bind_data

    @functools.partial(jax.jit, compiler_options=compiler_options)
    def batch(keys, params, data):
        bound = bind_data(target, data)
        grads, _ = jax.vmap(estimator.estimate, in_axes=(0, None, None))(keys, params, bound)
        leaves = jax.tree_util.tree_leaves(grads)
        return jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in leaves], axis=1)

    out = []
    keys = jax.random.split(rng_key, num_draws)
    for start in range(0, num_draws, batch_size):
        out.append(np.asarray(batch(keys[start : start + batch_size], params, data), np.float64))
    return np.concatenate(out, 0)


def check_unbiased(
    estimator,
    model: ConjugateModel,
    params,
    rng_key,
    num_draws: int = 100_000,
    use_local=True,
    compiler_options=None,
) -> GradientCheck:
    """Mean of ``num_draws`` gradient draws vs ``jax.grad(model.exact_elbo)(params)``
    (``compiler_options``: of the draws' program, :func:`gradient_draws`)."""
    from grepvi.target import Target

    target = Target(
        model.logdensity_fn,
        model.families,
        model.local_logdensity_fn if use_local else None,
        log_space=model.log_space,
    )
    draws = gradient_draws(estimator, target, params, rng_key, num_draws, compiler_options=compiler_options)
    exact = _flatten(jax.grad(model.exact_elbo)(params))
    variance = draws.var(0, ddof=1)
    return GradientCheck(draws.mean(0), np.sqrt(variance / num_draws), exact, variance)


# --- the local log joints of a model against their definition (brute force) ---------------


class LocalCheck(NamedTuple):
    """Brute-force check of the local log joints: one row per changed element.

    ``full_difference`` is the change of the whole log joint when one element changes;
    ``local_difference`` the change of that element's local log joint. They are equal when
    the local log joint holds every term that depends on the element.
    """

    latent: tuple[str, ...]
    index: tuple[tuple[int, ...], ...]
    full_difference: np.ndarray
    local_difference: np.ndarray
    scale: np.ndarray  # magnitude of the terms involved (for a relative tolerance)

    def max_relative_error(self) -> float:
        error = np.abs(self.full_difference - self.local_difference)
        return float(np.max(error / np.maximum(self.scale, 1.0)))


def check_local_log_joints(
    logdensity_fn: Callable[[dict], jax.Array],
    local_logdensity_fn: Callable[[dict], dict],
    latents: dict,
    seed: int = 0,
    num_elements: int = 4,
    local_shapes: dict | None = None,
) -> LocalCheck:
    """Changes single latent elements and compares the two differences (see :class:`LocalCheck`).

    Each change multiplies the element by a log-normal factor (``sigma = 0.5``), which keeps
    it positive; for a latent with all values in ``(0, 1)`` a result ``>= 1`` is reflected
    back into ``(0, 1)``. All changed points are evaluated in one batch (``jax.vmap`` of the
    jitted functions: two compilations).

    Args:
      logdensity_fn, local_logdensity_fn: the model.
      latents: a point in the support (dict of arrays). Use float64 (``jax.enable_x64``) for a
        tight comparison: the whole log joint is a sum of many terms.
      seed: picks the elements and their new values.
      num_elements: elements changed per latent (distinct, at most the latent's size).
      local_shapes: the local (batch) shape of a latent whose family has event axes
        (Dirichlet rows): its whole event vector is changed and renormalised to sum to 1.
    """
    rng = np.random.default_rng(seed)
    base = {name: np.asarray(value) for name, value in latents.items()}
    local_shapes = dict(local_shapes or {})
    names, indices, points = [], [], []
    for name in sorted(base):
        value = base[name]
        batch_shape = tuple(local_shapes.get(name, value.shape))
        size = math.prod(batch_shape)
        for position in rng.choice(size, min(num_elements, size), replace=False):
            index = tuple(int(i) for i in np.unravel_index(int(position), batch_shape))
            old = value[index]
            new = old * np.exp(0.5 * rng.standard_normal(np.shape(old)))
            if len(batch_shape) < value.ndim:  # an event vector on the simplex
                new = new / np.sum(new)
            elif np.all(value < 1.0) and new >= 1.0:
                new = old * old / new
            changed = value.copy()
            changed[index] = new
            names.append(name)
            indices.append(index)
            points.append(changed)
    batch = {
        name: np.stack([points[i] if names[i] == name else base[name] for i in range(len(points))])
        for name in base
    }
    batch = jax.tree_util.tree_map(jnp.asarray, batch)
    point = jax.tree_util.tree_map(jnp.asarray, base)
    total = jax.jit(logdensity_fn)
    local = jax.jit(local_logdensity_fn)
    base_total = np.asarray(total(point), np.float64)
    base_local = {name: np.asarray(value, np.float64) for name, value in local(point).items()}
    new_total = np.asarray(jax.vmap(total)(batch), np.float64)
    new_local = jax.vmap(local)(batch)
    full, difference, scale = [], [], []
    for row, (name, index) in enumerate(zip(names, indices, strict=True)):
        after = float(np.asarray(new_local[name][row])[index])
        before = float(base_local[name][index])
        full.append(float(new_total[row] - base_total))
        difference.append(after - before)
        scale.append(abs(after) + abs(before))
    return LocalCheck(tuple(names), tuple(indices), np.array(full), np.array(difference), np.array(scale))


def assert_resumed_bitwise(full, part, rest) -> None:
    """Raises ``AssertionError`` unless a fit stopped early (``part``) and resumed from its run
    state (``rest``, ``fit(..., resume=part.run_state)``) is bitwise the uninterrupted fit
    (``full``): the same iterations, parameters and ELBO trace (``part``'s then ``rest``'s)."""
    assert rest.convergence.num_iterations == full.convergence.num_iterations, (
        rest.convergence.num_iterations,
        full.convergence.num_iterations,
    )
    resumed, whole = jax.tree_util.tree_leaves(rest.params), jax.tree_util.tree_leaves(full.params)
    assert len(resumed) == len(whole)
    for x, y in zip(resumed, whole, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.concatenate([part.trace.elbo, rest.trace.elbo]), full.trace.elbo)

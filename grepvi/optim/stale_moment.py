"""Adam whose second moment restarts where the gradient's scale has left it.

Adam (Kingma & Ba 2015) divides the first moment of the gradient, ``m_t`` (decay ``b1 =
0.9``), by the root of its second, ``v_t = b2 v_{t-1} + (1 - b2) g_t^2`` (``b2 = 0.999``): a
memory of about 1,000 steps that forgets one factor of ``e`` per 1,000 steps. Where the
gradient's scale falls by many orders of magnitude while the run climbs, ``v`` remembers the
old scale for tens of thousands of steps and the step ``rho m / sqrt(v)`` is a tiny fraction of
``rho``. A regression on house prices in dollars (``benchmarks/scale_models.py``) starts at a
noise scale of 0.5, where the gradient of the slope is about 1e11; at a noise scale of 850 it
is 6.5e4, but ``v`` still held 3e18: Adam at a rate of 1 moved the slope from 6.8 to 14.8 in
30,000 steps (its posterior mean is 126).

Here a second, short memory of the squared gradient is kept with the first moment's decay,
``r_t = b1 r_{t-1} + (1 - b1) g_t^2``, and where the long memory is over ``ratio`` times the
short one (both bias-corrected, as Adam's moments), the long memory restarts at the short one:

    stale = v_hat > ratio r_hat,    v_hat <- r_hat where stale (and v likewise),
    update = m_hat / (sqrt(v_hat) + eps).

The short memory forgets a factor of ``e`` in 10 steps, so a second moment 1e10 too large is
forgotten in a few hundred steps instead of 23,000. With ``ratio = 10,000`` a steady gradient
never restarts it (ten steps' weighted mean of ``g^2`` under a ten-thousandth of its mean needs
about ten draws in a row within 0.01 of a Gaussian gradient's standard deviation: odds of
about 1e-21), and the update is Adam's, bitwise. A single outlier restarts it only where its
``g^2`` is over 1e7 times the recent gradients'. A restarted step is within ``rho`` per element
(``r_hat >= m_hat^2``: the same weights, Jensen's inequality).

The ratio is a compromise measured on the census models (``docs/optimization.md``): Adam's
stale second moment also brakes it after a start's transient, and some models need the brake.
At 100 the trial's Adam candidates restarted on 8 of 43 models (their first hundred steps'
gradients fall tenfold and more) and the trial kept Adam over the natural rule on two; at 1,000
a CAR disease map's Adam, restarted in its approach, fell three times and halved its step to
0.0125 (26,625 iterations against 8,725 at one seed, 11% to 46% more at three of four others);
at 10,000 the house prices took 7,175 iterations against 34,875 and the CAR map's five seeds
within 7% of their iterations either way (2% more in all).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["RecentAdamState", "scale_by_recent_adam", "recent_adam", "STALE_RATIO"]

STALE_RATIO = 10_000.0  # the long memory restarts where it is over this many times the short one


class RecentAdamState(NamedTuple):
    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates
    recent: optax.Updates  # the short memory of g^2 (decay b1)


def scale_by_recent_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, ratio: float | None = None
) -> optax.GradientTransformation:
    """``optax.scale_by_adam`` whose second moment restarts at a short memory of ``g^2``
    where it is over ``ratio`` times it (module docstring); Adam's update, bitwise, elsewhere."""

    ratio = STALE_RATIO if ratio is None else ratio

    def init_fn(params):
        zeros = optax.tree.zeros_like(params)
        return RecentAdamState(jnp.zeros([], jnp.int32), zeros, zeros, zeros)

    def update_fn(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        recent = optax.tree.update_moment_per_elem_norm(updates, state.recent, b1, 2)
        mu_hat = optax.tree.bias_correction(mu, b1, count)
        nu_hat = optax.tree.bias_correction(nu, b2, count)
        recent_hat = optax.tree.bias_correction(recent, b1, count)
        correction = 1.0 - b2 ** count.astype(jnp.float32)  # the long memory's bias, undone

        stale = jax.tree.map(lambda v, r: v > ratio * r, nu_hat, recent_hat)
        v_hat = jax.tree.map(jnp.where, stale, recent_hat, nu_hat)
        nu = jax.tree.map(lambda s, r, v: jnp.where(s, r * correction, v), stale, recent_hat, nu)
        new_updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu_hat, v_hat)
        return new_updates, RecentAdamState(count, mu, nu, recent)

    return optax.GradientTransformation(init_fn, update_fn)


def recent_adam(learning_rate, **options) -> optax.GradientTransformation:
    """``optax.adam`` with :func:`scale_by_recent_adam` in place of ``scale_by_adam``."""
    return optax.chain(scale_by_recent_adam(**options), optax.scale_by_learning_rate(learning_rate))

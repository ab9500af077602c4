"""A log density's gradient, recomputed in float64 where float32 overflows (and with zero products
taken as 0 where autodiff forms ``inf * 0``).

:func:`grepvi.fit` runs a model's own log density (float32) until a tenth of a window's
steps (or a hundredth of the run's, twenty at least) had a non-finite gradient outside the
trial; it then reruns that window, and every later one, with the target of
:func:`widened_target` (compiled then, once: a model that never overflows, or rarely, pays
nothing; its rare non-finite steps are skipped). The switch is part of the run's state, so a
resumed run takes the same path.

A model written in value space can overflow in its own gradient where its value is fine. The
sparse gamma DEF as a NumPyro user writes it (``z ~ Gamma(alpha, alpha / mean)``,
``mean = max(z' @ W, tiny)``) has ``d log p / d mean = alpha (z - mean) / mean^2``: finite in
float32 for ``mean`` down to 1e-38, but the chain rule forms ``alpha / mean^2`` first, which
overflows for ``mean < 1.7e-20``, and at the floor multiplies that ``inf`` by ``max``'s zero
derivative (``nan``). Gamma draws of shape 0.05 reach such means often: on a small DEF of
them 192 of 200 float32 gradient draws were non-finite, 0 of 200 widened.

:func:`float64_where_float32_overflows` keeps float32's gradient where it is finite (every step
but those) and otherwise evaluates the same function at the same point in float64
(``jax.enable_x64`` inside the traced backward pass, a ``lax.cond`` branch that runs only
then) and rounds the result to float32. The float64 pass also takes a product with an exact
zero factor as 0 (:mod:`grepvi.inference.zero_products`): autodiff's ``inf * 0 = nan`` where a
term is flat along the chain, as ``(dose / ed50) ** hill`` in ``ed50`` at a dose of 0 and
``hill < 1`` (an Emax model whose start drew 54% of its draws there; no float precision mends
it). Where the gradient is still not finite, the driver skips the step as before
(``NonFiniteStepWarning``): nothing is clipped, the estimator stays the exact gradient (a
subgradient at a kink) of the same objective.

The function must give the same value in both precisions up to rounding: the NumPyro adapter
clamps its log-space latents at float32's bounds in both (``from_log_space(...,
bounds_dtype=float32)``).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.inference.state import all_finite
from grepvi.inference.zero_products import zero_absorbing
from grepvi.target import Target

__all__ = ["float64_where_float32_overflows", "widened_target"]


def _zero_cotangent(leaf):
    if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
        return jnp.zeros_like(leaf)
    return np.zeros(np.shape(leaf), jax.dtypes.float0)


def float64_where_float32_overflows(logdensity_fn: Callable) -> Callable:
    """``logdensity_fn(latents, data)`` with a reverse-mode gradient in ``latents`` that is
    float32's where finite and float64's (rounded to float32, products with an exact zero
    factor taken as 0: :func:`~grepvi.inference.zero_products.zero_absorbing`) where float32's
    is not.

    The value and the finite gradients are unchanged; ``data`` gets zero cotangents (it is
    not differentiated). Reverse mode only (``jax.custom_vjp``).
    """

    def _gradient(point, cotangent, data):  # the pullback, run again by zero_absorbing
        _, pullback = jax.vjp(lambda at: logdensity_fn(at, data), point)
        return pullback(cotangent)[0]

    @jax.custom_vjp
    def widened(latents, data):
        return logdensity_fn(latents, data)

    def forward(latents, data):
        value, pullback = jax.vjp(lambda point: logdensity_fn(point, data), latents)
        return value, (latents, data, pullback)

    def backward(residuals, cotangent):
        latents, data, pullback = residuals
        (grads,) = pullback(cotangent)

        def in_float64(_):
            with jax.enable_x64(True):
                wide = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, jnp.float64), latents)
                wide_grads = zero_absorbing(_gradient)(wide, jnp.asarray(cotangent, jnp.float64), data)
                return jax.tree_util.tree_map(
                    lambda grad, leaf: grad.astype(jnp.result_type(leaf)), wide_grads, latents
                )

        finite = all_finite(grads)
        # x64 on around the cond itself, not only its branch: under vmap (a step averaging
        # several draws) the cond becomes a select whose batching rule re-traces the float64
        # branch where the cond is bound, and fails there with x64 off.
        with jax.enable_x64(True):
            grads = jax.lax.cond(finite, lambda _: grads, in_float64, None)
        return grads, jax.tree_util.tree_map(_zero_cotangent, data)

    widened.defvjp(forward, backward)
    return widened


def widened_target(target: Target) -> Target:
    """``target`` with its log density's gradient taken by
    :func:`float64_where_float32_overflows` (the local log joints, never differentiated, are
    unchanged)."""
    if target.takes_data:
        return target._replace(logdensity_fn=float64_where_float32_overflows(target.logdensity_fn))
    widened = float64_where_float32_overflows(lambda latents, data: target.logdensity_fn(latents))
    return target._replace(logdensity_fn=lambda latents: widened(latents, None))

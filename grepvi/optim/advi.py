"""The adaptive step-size sequence of ADVI, as optax gradient transformations.

Ruiz, Titsias & Blei (2016), Eq. 9, from Kucukelbir et al. (2017)::

    rho_k^(i) = eta * i^(-1/2 + kappa) / (tau + sqrt(s_k^(i)))
    s_k^(i)   = gamma (g_k^(i))^2 + (1 - gamma) s_k^(i-1),     s_k^(1) = (g_k^(1))^2

with ``kappa = 1e-16``, ``tau = 1``, ``gamma = 0.1``; the first ``s`` is the first squared
gradient, as in Kucukelbir et al. (2017, Section 3.3) and Stan. The update direction is
``rho * g``.

optax minimizes, so grepvi feeds it the gradient of ``-ELBO``; ``advi_stepsize(eta)`` then
ascends the ELBO: ``v <- v + rho * grad ELBO``.

Example:
    >>> import jax.numpy as jnp, optax
    >>> optimizer = advi_stepsize(learning_rate=0.1)
    >>> params = {"x": jnp.zeros(2)}
    >>> state = optimizer.init(params)
    >>> updates, state = optimizer.update({"x": -jnp.array([1.0, 2.0])}, state)
    >>> [round(float(u), 4) for u in updates["x"]]  # 0.1 * g / (1 + |g|)
    [0.05, 0.0667]

References:
    Kucukelbir, Tran, Ranganath, Gelman & Blei (2017). Automatic Differentiation Variational
    Inference. JMLR 18(14).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["ScaleByAdviStepsizeState", "scale_by_advi_stepsize", "advi_stepsize"]


class ScaleByAdviStepsizeState(NamedTuple):
    count: jax.Array  # iterations done so far (i - 1 before the update)
    s: optax.Updates  # running average of squared gradients


def scale_by_advi_stepsize(
    tau: float = 1.0, gamma: float = 0.1, kappa: float = 1e-16, past_only: bool = False
) -> optax.GradientTransformation:
    """Scales updates by ``i^(-1/2 + kappa) / (tau + sqrt(s))`` (Eq. 9 without ``eta``).

    ``past_only``: divide step ``i`` by ``s_(i-1)``, the average of the *previous* squared
    gradients (the first step by ``g_1^2``), then update ``s``. Eq. 9 as printed puts ``g_i^2``
    into the scale of ``g_i`` itself, which shrinks large noisy gradients more than small ones
    and biases where the iterates settle (PyMC issue 8444, fixed the same way in PR 8447).
    """

    def init_fn(params):
        return ScaleByAdviStepsizeState(
            count=jnp.zeros([], jnp.int32),
            s=jax.tree_util.tree_map(jnp.zeros_like, params),
        )

    def update_fn(updates, state, params=None):
        del params
        count = state.count + 1
        first = state.count == 0
        s = jax.tree_util.tree_map(
            lambda g, s_prev: jnp.where(first, g**2, gamma * g**2 + (1.0 - gamma) * s_prev),
            updates,
            state.s,
        )
        scale = s
        if past_only:
            scale = jax.tree_util.tree_map(lambda g, s_prev: jnp.where(first, g**2, s_prev), updates, state.s)
        decay = jnp.asarray(count, jnp.float32) ** (-0.5 + kappa)
        updates = jax.tree_util.tree_map(
            lambda g, s_k: decay.astype(g.dtype) * g / (tau + jnp.sqrt(s_k)), updates, scale
        )
        return updates, ScaleByAdviStepsizeState(count=count, s=s)

    return optax.GradientTransformation(init_fn, update_fn)


def advi_stepsize(
    learning_rate: float = 0.1,
    tau: float = 1.0,
    gamma: float = 0.1,
    kappa: float = 1e-16,
    past_only: bool = False,
) -> optax.GradientTransformation:
    """Eq. 9 with constant ``eta = learning_rate``, as an optax optimizer (minimizing).

    This is the paper's schedule, run when a step size is given explicitly (``fit(...,
    step_size=eta)``, ``--step-size``); ``past_only`` is the variant that scales each step by
    the previous gradients only (see :func:`scale_by_advi_stepsize`).

    ``eta`` lives in the optimizer's state (``optax.inject_hyperparams``), not in the compiled
    program: runs that differ only in ``eta`` (the eta search of Table 1) share one program,
    and a run's ``eta`` can be changed between steps
    (``state.hyperparams["learning_rate"]``).
    """
    return optax.inject_hyperparams(_advi_chain, static_args=("tau", "gamma", "kappa", "past_only"))(
        learning_rate=learning_rate, tau=tau, gamma=gamma, kappa=kappa, past_only=past_only
    )


def _advi_chain(learning_rate, tau, gamma, kappa, past_only):
    return optax.chain(
        scale_by_advi_stepsize(tau=tau, gamma=gamma, kappa=kappa, past_only=past_only),
        optax.scale_by_learning_rate(learning_rate),
    )

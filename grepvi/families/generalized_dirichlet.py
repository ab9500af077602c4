"""Generalized Dirichlet family (Connor & Mosimann 1969): independent beta sticks, broken off
the simplex in turn.

For ``k = 0, ..., K-2`` the stick ``z_k ~ Beta(a_k, b_k)`` independently, and::

    x_k     = z_k s_k,      s_0 = 1,   s_{k+1} = s_k (1 - z_k)
    x_{K-1} = s_{K-1}

``2 (K - 1)`` parameters where the Dirichlet has ``K``: the Dirichlet is the case ``b_k =
a_{k+1} + ... + a_{K-1}`` (Connor & Mosimann 1969; Wong 1998), so every Dirichlet ``q`` is a
member, and the sticks' two shapes give each direction of the simplex a spread of its own (a
Dirichlet has one concentration for all of them). A concentrated posterior whose spread differs
by direction (25 samples' source proportions in a mixing model, sd 0.04) is fitted 3.8 nats
closer than by the Dirichlet. Not the NumPyro adapter's default for a simplex site (name it:
``families={"w": "generalized-dirichlet"}``): over fourteen benchmark models with a simplex
latent its ELBO was the Dirichlet's or higher, but the fits took 1.1-1.7 times as long (more
special functions a stick than a Dirichlet component), 3.2 times on a topic model, and a GARCH
model's three weights did not converge in 9,100 iterations (``docs/performance.md``,
fifty-second session).

With ``x`` on its first ``K - 1`` coordinates (the base measure of
:class:`~grepvi.families.dirichlet.Dirichlet`'s ``log_prob``) the map ``z -> x`` is triangular
with ``dx_k / dz_k = s_k``, so::

    log q(x) = sum_k log Beta(z_k; a_k, b_k) - sum_k log s_k
    H[q]     = sum_k H[Beta(a_k, b_k)] + sum_k (K - 2 - k) (psi(b_k) - psi(a_k + b_k))

(``E[log s_k] = sum_{j<k} E[log(1 - z_j)]``, ``E[log(1 - z)] = psi(b) - psi(a + b)``). The moments
factorize: ``E[x_k] = E[z_k] prod_{j<k} E[1 - z_j]``, and likewise for ``E[x_k^2]``.

G-REP (Ruiz, Titsias & Blei 2016, Section 3): ``eps`` is the sticks' standardized logits, each
standardized as :class:`~grepvi.families.beta.Beta` does (``logit z_k = eps_k sigma_k + psi(a_k)
- psi(b_k)``), so ``log q_eps`` and ``g_corr`` are the sticks' own and the stick-breaking map is
a fixed bijection after them. Everything is computed in log space: ``log z_k = log sigmoid(l_k)``,
``log(1 - z_k) = log sigmoid(-l_k)``, ``log x`` from their sums, so a small stick shape's draw is
never rounded to 0 on the way to the model. The Fisher information is the sticks' (a fixed
bijection leaves it unchanged): block-diagonal, one beta block per stick, so natural-gradient
steps apply.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.families.base import Family
from grepvi.families.beta import Beta

__all__ = ["GeneralizedDirichlet"]


@dataclasses.dataclass(frozen=True)
class GeneralizedDirichlet(Family):
    """Mean-field generalized Dirichlet over the batch axes; parameters ``{"concentration1",
    "concentration0"}`` of shape ``shape[:-1] + (K - 1,)``: the sticks' ``a`` and ``b``, stored
    unconstrained (softplus inverse) as :class:`~grepvi.families.beta.Beta`'s.

    The start is the Dirichlet of ``init_concentration`` in every component (``a_k = c``,
    ``b_k = (K - 1 - k) c``): the uniform distribution on the simplex by default, the
    :class:`~grepvi.families.dirichlet.Dirichlet` family's start.
    """

    init_concentration: float = 1.0
    init_noise: float = 0.0

    event_ndim = 1
    support = "simplex"

    # the sticks' Fisher information, positive parameters and shape cap are the beta's
    has_fisher = True
    positive_parameters = Beta.positive_parameters
    shape_parameters = Beta.shape_parameters
    max_shape = Beta.max_shape

    def __post_init__(self):
        super().__post_init__()
        if len(self.shape) < 1 or self.shape[-1] < 2:
            raise ValueError(
                f"GeneralizedDirichlet: shape must end in an event axis K >= 2, got {self.shape}"
            )

    @property
    def sticks(self) -> Beta:
        """The beta family of the ``K - 1`` sticks (shape ``shape[:-1] + (K - 1,)``)."""
        return Beta(shape=(*self.shape[:-1], self.shape[-1] - 1))

    def init_params(self, rng_key=None, dtype=jnp.float32):
        k = self.shape[-1]
        stick_shape = (*self.shape[:-1], k - 1)
        a = jnp.full(stick_shape, self.init_concentration, dtype)
        b = jnp.broadcast_to(self.init_concentration * jnp.arange(k - 1, 0, -1, dtype=dtype), stick_shape)
        if rng_key is not None and self.init_noise > 0:
            key_a, key_b = jax.random.split(rng_key)
            a = a * jnp.exp(self.init_noise * jax.random.normal(key_a, stick_shape, dtype))
            b = b * jnp.exp(self.init_noise * jax.random.normal(key_b, stick_shape, dtype))
        floor = self.sticks.min_concentration
        return {
            "concentration1": numerics.inverse_softplus(a - floor),
            "concentration0": numerics.inverse_softplus(b - floor),
        }

    def natural_params(self, params):
        return self.sticks.natural_params(params)

    def narrowed_params(self, params, factor):
        return self.sticks.narrowed_params(params, factor)

    def _ab(self, params):
        natural = self.natural_params(params)
        return natural["concentration1"], natural["concentration0"]

    # --- the stick-breaking map, in log space ---------------------------------------------
    # Sums over earlier sticks are products with constant 0/1 matrices (one dot each, and one
    # for their derivative): a cumulative sum lowers to an associative scan of slices and pads
    # on CPU, compiled again in every derivative of it.
    def _before(self, dtype):
        """``M[j, k] = 1`` where ``j < k``, shape ``(K - 1, K)``: ``v @ M = [sum_{j<k} v_j]_k``."""
        k = self.shape[-1]
        return jnp.asarray(np.arange(k - 1)[:, None] < np.arange(k)[None, :], dtype)

    def _tail_mask(self, dtype):
        """``0`` where ``j >= k``, ``-inf`` elsewhere (``K x K``): ``logsumexp(log x + mask)``
        over ``j`` is ``log sum_{j>=k} x_j``."""
        k = self.shape[-1]
        return jnp.asarray(np.where(np.arange(k)[None, :] >= np.arange(k)[:, None], 0.0, -np.inf), dtype)

    def log_x_from_logits(self, logit):
        """``log x`` (K components) from the sticks' logits (K - 1)."""
        log_z, log_rest = jax.nn.log_sigmoid(logit), jax.nn.log_sigmoid(-logit)
        return self._log_x_from_log_parts(log_z, log_rest)

    def _log_x_from_log_parts(self, log_first, log_rest):
        """``log x_k = log_first_k + sum_{j<k} log_rest_j`` (``log_first_{K-1} = 0``)."""
        padded = jnp.concatenate([log_first, jnp.zeros_like(log_first[..., :1])], -1)
        return padded + log_rest @ self._before(log_rest.dtype)

    def _logits_from_log_x(self, log_x):
        """The sticks' logits and ``log s_k`` from ``log x``: ``log s_k = log sum_{j>=k} x_j``,
        ``logit z_k = log x_k - log(s_k - x_k) = log x_k - log s_{k+1}``."""
        log_tail = jax.nn.logsumexp(log_x[..., None, :] + self._tail_mask(log_x.dtype), axis=-1)
        return log_x[..., :-1] - log_tail[..., 1:], log_tail[..., :-1]

    # --- sampling and the standardization -------------------------------------------------
    def sample_standardized(self, params, rng_key, sample_shape=()):
        return self.sticks.sample_standardized(params, rng_key, sample_shape)

    def log_transform(self, params, eps):
        """``log T(eps; v)`` (exact, no underflow)."""
        return self.log_x_from_logits(self.sticks.logit_transform(params, eps))

    def transform(self, params, eps):
        return numerics.safe_exp(self.log_transform(params, eps))

    def standardize(self, params, z):
        logit, _ = self._logits_from_log_x(jnp.log(z))
        a, b = self._ab(params)
        return (logit - numerics.digamma(a) + numerics.digamma(b)) / self.sticks._sigma(a, b)

    def log_abs_det_jacobian(self, params, eps):
        """``log |det d x_{0:K-2} / d eps|``: the sticks' ``log J`` plus ``sum_k log s_k``."""
        logit = self.sticks.logit_transform(params, eps)
        log_s = (jax.nn.log_sigmoid(-logit) @ self._before(logit.dtype))[..., :-1]  # log s_0..s_{K-2}
        return jnp.sum(self.sticks.log_abs_det_jacobian(params, eps), -1) + jnp.sum(log_s, -1)

    def log_prob_standardized(self, params, eps):
        """``log q_eps``: the sticks' (the stick-breaking map is fixed)."""
        return jnp.sum(self.sticks.log_prob_standardized(params, eps), -1)

    # --- density and moments --------------------------------------------------------------
    def log_prob(self, params, z):
        return self.log_prob_log_space(params, jnp.log(z))

    def log_prob_log_space(self, params, log_x):
        logit, log_s = self._logits_from_log_x(log_x)
        per_stick = self.sticks.log_prob_log_space(params, logit)
        return jnp.sum(per_stick - log_s, -1)

    def entropy(self, params):
        a, b = self._ab(params)
        k = a.shape[-1] + 1
        later = jnp.arange(k - 2, -1, -1, dtype=a.dtype)  # K - 2 - j sticks come after stick j
        expected_log_rest = numerics.digamma(b) - numerics.digamma(a + b)
        return jnp.sum(self.sticks.entropy(params) + later * expected_log_rest, -1)

    def _stick_moments(self, params):
        a, b = self._ab(params)
        total = a + b
        return (
            a / total,
            b / total,
            a * (a + 1.0) / (total * (total + 1.0)),
            b * (b + 1.0) / (total * (total + 1.0)),
        )

    def _broken(self, first, rest):
        """``[first_k prod_{j<k} rest_j]_k`` (``first_{K-1} = 1``), through logs of the factors
        (positive moments of the sticks)."""
        return jnp.exp(self._log_x_from_log_parts(jnp.log(first), jnp.log(rest)))

    def mean(self, params):
        mean_z, mean_rest, _, _ = self._stick_moments(params)
        return self._broken(mean_z, mean_rest)

    def log_space_mean(self, params):
        """``log E[x]``, summed in logs (no product of many small factors)."""
        a, b = self._ab(params)
        log_total = jnp.log(a + b)
        return self._log_x_from_log_parts(jnp.log(a) - log_total, jnp.log(b) - log_total)

    def variance(self, params):
        mean_z, mean_rest, square_z, square_rest = self._stick_moments(params)
        mean = self._broken(mean_z, mean_rest)
        return self._broken(square_z, square_rest) - mean**2

    # --- Fisher information: one beta block per stick -------------------------------------
    def fisher_solve(self, params, grad):
        natural, squared = self.sticks.fisher_solve(params, grad)
        return natural, jnp.sum(squared, -1)

    def fisher_quad(self, params, delta):
        return jnp.sum(self.sticks.fisher_quad(params, delta), -1)

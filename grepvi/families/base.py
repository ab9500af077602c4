"""The interface every variational family implements.

A family is static code (a frozen dataclass: its latent shape and options); its variational
parameters are a plain dict of *unconstrained* arrays, a pytree that optax and ``jax.jit``
handle directly. Every method is a pure function of those parameters.

The G-REP pieces (Ruiz, Titsias & Blei 2016, Section 3) are

* ``standardize(params, z)``: the standardization ``eps = T^{-1}(z; v)``;
* ``transform(params, eps)``: its inverse ``z = T(eps; v)``, differentiable in ``v``;
* ``log_abs_det_jacobian(params, eps)``: ``log |det d T / d eps|`` (paper Eq. 3);
* ``log_prob_standardized(params, eps)``: ``log q_eps(eps; v) = log q(T(eps; v); v) + log J``.

Families draw the standardized variable directly (``sample_standardized``) so that a gamma
draw never passes through an underflowing ``z``: ``eps`` comes from ``log z``.
"""

import abc
import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Family", "Posterior", "to_log_space", "from_log_space", "beyond_clamp"]

Params = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Family(abc.ABC):
    """A mean-field family over a latent array of ``shape``.

    ``shape`` is the full shape of the latent array; for a family with ``event_ndim = 1``
    (Dirichlet) its last axis is the event axis. Per-element quantities (``log_prob``,
    ``entropy``, ``log_prob_standardized``) have the *batch* shape ``shape[:ndim-event_ndim]``.
    """

    shape: tuple[int, ...] = ()

    event_ndim = 0
    support = "real"

    def __post_init__(self):
        from grepvi.validation import shape as checked_shape

        object.__setattr__(self, "shape", checked_shape(self.shape, f"{type(self).__name__}: shape"))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.shape[: len(self.shape) - self.event_ndim]

    # --- parameters -------------------------------------------------------------------
    @abc.abstractmethod
    def init_params(self, rng_key=None, dtype=jnp.float32) -> Params:
        """Unconstrained variational parameters for a latent of ``self.shape``."""

    @abc.abstractmethod
    def natural_params(self, params: Params) -> dict[str, jax.Array]:
        """The constrained parameters (e.g. ``{"concentration": a, "rate": b}``)."""

    def narrowed_params(self, params: Params, factor) -> Params:
        """``params`` with ``q``'s spread narrowed to ``factor`` (``0 < factor < 1``) of its
        width at the same centre: a Gaussian's ``sigma`` (of the draws' input ``mu + sigma
        eps``) times ``factor``; a gamma's, beta's or Dirichlet's standard deviation at the same
        mean times ``factor``. The default procedure restarts its trial from such a start where
        every rule failed from the families' own (a ``q`` whose tails reach where the model
        overflows: :func:`grepvi.inference.controller.narrows`). A family that does not say how
        keeps ``params``."""
        return params

    # --- distribution -----------------------------------------------------------------
    @abc.abstractmethod
    def sample_standardized(self, params: Params, rng_key, sample_shape=()) -> jax.Array:
        """``eps = T^{-1}(z; v)`` for ``z ~ q(z; v)``; no gradient flows through it."""

    def sample(self, params: Params, rng_key, sample_shape=()) -> jax.Array:
        """Draws ``z ~ q(z; v)`` with shape ``sample_shape + self.shape``."""
        eps = self.sample_standardized(params, rng_key, sample_shape)
        return jax.lax.stop_gradient(self.transform(params, eps))

    @abc.abstractmethod
    def log_prob(self, params: Params, z) -> jax.Array:
        """``log q(z; v)`` per element (batch shape)."""

    @abc.abstractmethod
    def entropy(self, params: Params) -> jax.Array:
        """Analytic entropy per element (batch shape)."""

    @abc.abstractmethod
    def mean(self, params: Params) -> jax.Array: ...

    @abc.abstractmethod
    def variance(self, params: Params) -> jax.Array: ...

    # --- standardization (paper Section 3) --------------------------------------------
    @abc.abstractmethod
    def standardize(self, params: Params, z) -> jax.Array:
        """``eps = T^{-1}(z; v)``."""

    @abc.abstractmethod
    def transform(self, params: Params, eps) -> jax.Array:
        """``z = T(eps; v)``, differentiable in ``v``."""

    @abc.abstractmethod
    def log_abs_det_jacobian(self, params: Params, eps) -> jax.Array:
        """``log J(eps, v) = log |det d T(eps; v) / d eps|`` per element (batch shape)."""

    def log_prob_standardized(self, params: Params, eps) -> jax.Array:
        """``log q_eps(eps; v) = log q(T(eps; v); v) + log J(eps, v)`` (paper Eq. 3)."""
        return self.log_prob(params, self.transform(params, eps)) + self.log_abs_det_jacobian(params, eps)

    # --- the model's inputs in log space ----------------------------------------------
    # A target with ``log_space=True`` receives every latent in the space of its support
    # where float rounding cannot hurt: ``log z`` for positive and simplex latents, ``logit z
    # = log z - log(1 - z)`` for the unit interval (``log z = log_sigmoid(u)``, ``log(1 - z)
    # = log_sigmoid(-u)``, both exact), ``z`` itself on the real line. The families draw in
    # that space already, so nothing is clamped or rounded to 0 or 1 on the way to the model.

    def log_space_transform(self, params: Params, eps) -> jax.Array:
        """``T(eps; v)`` in the log space of the support (see above), differentiable in ``v``."""
        if self.support == "unit_interval":
            return self.logit_transform(params, eps)
        if self.support in ("positive", "simplex"):
            return self.log_transform(params, eps)
        return self.transform(params, eps)

    def to_log_space(self, z) -> jax.Array:
        """A value ``z`` in the log space of the support (``log``, ``logit`` or itself)."""
        return to_log_space(z, self.support)

    def value_from_log_space(self, u, bounds_dtype=None) -> jax.Array:
        """The inverse of :meth:`to_log_space`: ``z`` from ``u`` (:func:`from_log_space`)."""
        return from_log_space(u, self.support, bounds_dtype)

    def has_input_moments(self, log_space: bool) -> bool:
        """Whether :meth:`input_moments` is known in closed form for a target with or without
        ``log_space`` (:mod:`grepvi.estimators.quadratic_control_variate`)."""
        return False

    def input_moments(self, params: Params, log_space: bool):
        """``(E_q[x], Var_q[x])`` per element of the latent as the target receives it (``x``
        in the log space of the support with ``log_space``, ``z`` without), differentiable in
        the parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form input moments")

    def log_space_mean(self, params: Params) -> jax.Array:
        """``E_q[z]`` in the log space of the support (``log``/``logit`` of the mean), computed
        where the family allows without forming the mean (a log-normal's ``exp(mu + s^2/2)``
        overflows float32 for ``mu + s^2/2 > 88``; ADVI's weights on Omniglot got there)."""
        return self.to_log_space(self.mean(params))

    def log_prob_log_space(self, params: Params, u) -> jax.Array:
        """``log q(z; v)`` per element for ``z`` given in the log space of the support (``u``).

        The score-function estimators (BBVI) differentiate it in ``v`` at exact log-space
        draws: through ``z`` itself a gamma draw below ``1e-30`` is clamped there (float32),
        and at a shape of 0.1 (0.1% of the draws) that biased BBVI's gradient by 10
        standard errors. The default goes through the clamped ``z``; the families override it.
        """
        return self.log_prob(params, from_log_space(u, self.support))

    def sample_log_space(self, params: Params, rng_key, sample_shape=()) -> jax.Array:
        """A draw of ``q`` in the log space of the support; no gradient flows through it."""
        eps = self.sample_standardized(params, rng_key, sample_shape)
        return jax.lax.stop_gradient(self.log_space_transform(params, eps))

    # --- information geometry (natural-gradient steps) ----------------------------------
    has_fisher = False  # True where fisher_solve / fisher_quad have closed forms
    # Parameters stored as softplus^{-1}(theta - floor) of a positive theta: natural-gradient
    # steps cap their relative change (grepvi.optim.advi.natural_gradient).
    positive_parameters: ClassVar[tuple[str, ...]] = ()
    # The positive parameters that are shapes (concentrations), and the largest value the
    # default procedure's rules give them (grepvi.optim.natural_gradient.cap_shapes).
    shape_parameters: ClassVar[tuple[str, ...]] = ()
    max_shape: ClassVar[float] = 1e8

    def fisher_solve(self, params: Params, grad: Params) -> tuple[Params, jax.Array]:
        """``(F^{-1} g, g^T F^{-1} g)``: the natural gradient and its squared length per element.

        ``F`` is the Fisher information of ``q`` in the unconstrained parameters ``v``
        (block-diagonal over the batch elements), ``g`` a gradient like ``params``. The squared
        length has the batch shape: ``rho^2 g^T F^{-1} g / 2`` is, to second order, the KL
        divergence that a step ``rho F^{-1} g`` moves element ``i`` (Amari 1998).
        """
        raise NotImplementedError(f"{type(self).__name__} has no closed-form Fisher information")

    def fisher_quad(self, params: Params, delta: Params) -> jax.Array:
        """``delta^T F delta`` per batch element (twice the KL of a small move ``delta``)."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form Fisher information")

    # --- helpers ----------------------------------------------------------------------
    def bind(self, params: Params) -> "Posterior":
        return Posterior(self, params)

    def _check_params(self, params: Params, names) -> None:
        missing = [name for name in names if name not in params]
        if missing:
            raise KeyError(f"{type(self).__name__}: parameters {missing} missing from {list(params)}")


@dataclasses.dataclass(frozen=True)
class Posterior:
    """A family bound to fitted parameters: ``mean()``, ``variance()``, ``std()``, ``sample(key, n)``."""

    family: Family
    params: Any

    def mean(self):
        return self.family.mean(self.params)

    def variance(self):
        return self.family.variance(self.params)

    def std(self):
        """The standard deviation, ``sqrt(variance())``, elementwise."""
        return jnp.sqrt(self.variance())

    def sample(self, rng_key, num_samples: int | None = None):
        sample_shape = () if num_samples is None else (int(num_samples),)
        return self.family.sample(self.params, rng_key, sample_shape)

    def log_prob(self, z):
        return self.family.log_prob(self.params, z)

    def entropy(self):
        return self.family.entropy(self.params)

    def natural_params(self):
        return self.family.natural_params(self.params)

    def __repr__(self):
        return f"Posterior({type(self.family).__name__}, shape={self.family.shape})"


def to_log_space(z, support: str) -> jax.Array:
    """``z`` in the log space of ``support``: ``log z`` (positive, simplex), ``logit z``
    (unit interval), ``z`` (real)."""
    z = jnp.asarray(z)
    if support == "unit_interval":
        return jnp.log(z) - jnp.log1p(-z)
    if support in ("positive", "simplex"):
        return jnp.log(z)
    return z


def from_log_space(u, support: str, bounds_dtype=None) -> jax.Array:
    """The inverse of :func:`to_log_space`: ``exp``, ``sigmoid`` or the identity, clamped
    as the families' ``transform`` (``grepvi.numerics.safe_exp``, ``safe_sigmoid``; their
    ``bounds_dtype``)."""
    from grepvi import numerics

    if support == "unit_interval":
        return numerics.safe_sigmoid(u, bounds_dtype)
    if support in ("positive", "simplex"):
        return numerics.safe_exp(u, bounds_dtype)
    return u


def beyond_clamp(u, support: str, bounds_dtype=None) -> jax.Array:
    """How far a log-space value ``u`` lies beyond the clamp of :func:`from_log_space`:
    ``u - clip(u, lower, upper)`` (0 where the model sees ``z`` itself).

    Along this direction the clamps' derivatives (``grepvi.numerics.safe_exp``,
    ``safe_sigmoid``) pass through, so a model's value at the clamped ``z`` plus its
    derivative times this is its value extended linearly in ``log z`` (``logit z``) below
    the clamp: exact for terms ``c log z``, the terms a small gamma shape's tail meets."""
    from grepvi import numerics

    dtype = np.dtype(bounds_dtype or jnp.result_type(u))
    if support == "unit_interval":
        lower, upper = numerics._logit_bounds(dtype)
        return u - jnp.clip(u, lower, upper)
    if support in ("positive", "simplex"):
        return u - jnp.clip(u, numerics.log_tiny(dtype), numerics.log_huge(dtype))
    return jnp.zeros_like(u)


def _broadcast_init(value, shape, dtype):
    return jnp.full(shape, value, dtype=dtype)

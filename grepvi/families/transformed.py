"""Families over transforms: a built-in family moved by an affine map, and a Normal pushed
through a bijection onto any constrained support.

G-REP holds for any differentiable transform (Ruiz, Titsias & Blei 2016, Section 3), so a
family on a shifted or scaled support, or on a support reached by a bijection, needs no new
theory; these two wrappers give every continuous support of NumPyro's constraint registry a
family (:func:`grepvi.interop.numpyro_model.family_for_support` picks them).

:class:`Affine`: ``z = loc + scale * w`` with ``w`` from a scalar base family (``c + Gamma``
on ``(c, inf)``, ``a + (b - a) Beta`` on ``(a, b)``, ``c - Gamma`` on ``(-inf, c)``). The
standardization is the base's (``eps = T_base^{-1}((z - loc) / scale)``), so ``log q_eps`` and
``g_corr`` are the base's; ``log q(z) = log q_base(w) - log |scale|``, ``H = H_base + log
|scale|``; the Fisher information (a fixed bijection leaves it unchanged) is the base's, so
natural-gradient steps apply.

:class:`TransformedNormal`: ``z = T(mu + sigma eps)``, ``eps ~ N(0, I)`` on the unconstrained
space, ``T`` a bijection onto the support (by default ``numpyro.distributions.transforms.
biject_to(support)``: ordered vectors, positive ordered vectors, Cholesky factors of
correlation matrices, lower Cholesky factors, ...). This is ADVI's family (Kucukelbir et al.
2017) for that support; ``eps`` is standard normal whatever ``(mu, sigma)``, so ``g_corr = 0``.
Its entropy is ``H[N(mu, sigma^2)] + E[log |det J_T(u)|]``. For every transform of NumPyro's
registry ``log |det J_T(u)|`` is a *sum of functions of single coordinates* of ``u`` (exp,
sigmoid, softplus, the ordered and stick-breaking maps, the tanh of the correlation Cholesky
map): then ``E[log J] = sum_j E[g_j(u_j)]`` is computed exactly (to quadrature accuracy) by
64-point Gauss-Hermite quadrature with *all* coordinates at the same node, ``sum_m w_m log
J(mu + sqrt(2) sigma x_m)``. The family checks that property when it is built (the Hessian
of ``log J`` must be diagonal at a random point) and refuses a transform without it. For
corr_cholesky and lower_cholesky this is the only family: a Normal on the unconstrained space
(no conjugate-like family exists there); its mean and variance are Monte Carlo estimates
(4,096 draws with a fixed key) where the transform is not the identity.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.families.base import Family
from grepvi.families.location_scale import HALF_LOG_2PI, gaussian_fisher_diagonal

__all__ = ["Affine", "TransformedNormal", "MOMENT_DRAWS"]

MOMENT_DRAWS = 4096  # Monte Carlo draws of a TransformedNormal's mean and variance
_NODES, _WEIGHTS = np.polynomial.hermite.hermgauss(64)  # Gauss-Hermite, as grepvi.families.logitnormal


@dataclasses.dataclass(frozen=True, eq=False)
class Affine(Family):
    """``loc + scale * w`` for ``w`` from a scalar ``base`` family (see the module docstring).

    Args:
      base: a family with ``event_ndim == 0`` (Gamma, LogNormal, Beta, LogitNormal, ...); its
        ``shape`` is the latent's shape.
      loc, scale: the affine map (scalars or arrays broadcasting to the shape; ``scale != 0``;
        a negative scale reflects: ``c - Gamma`` lives on ``(-inf, c)``).
      shape: ignored (taken from ``base``).
    """

    base: Family = None
    loc: Any = 0.0
    scale: Any = 1.0

    def __post_init__(self):
        if not isinstance(self.base, Family):
            raise TypeError(f"Affine: base must be a grepvi family, got {self.base!r}")
        if self.base.event_ndim != 0:
            raise ValueError(f"Affine: the base family must be scalar, got {type(self.base).__name__}")
        object.__setattr__(self, "shape", tuple(self.base.shape))
        loc, scale = np.asarray(self.loc, np.float64), np.asarray(self.scale, np.float64)
        if np.any(scale == 0) or not np.all(np.isfinite(scale)) or not np.all(np.isfinite(loc)):
            raise ValueError(f"Affine: loc and scale must be finite and scale non-zero, got {loc}, {scale}")
        object.__setattr__(self, "loc", loc)
        object.__setattr__(self, "scale", scale)

    @property
    def support(self):
        """``"greater_than"``, ``"less_than"`` or ``"interval"`` (the latent is handed to a
        log-space target as ``z`` itself); :meth:`bounds` gives the numbers."""
        if self.base.support == "unit_interval":
            return "interval"
        if self.base.support == "positive":
            return "greater_than" if np.all(self.scale > 0) else "less_than"
        return "real"

    def bounds(self):
        """``(lower, upper)`` arrays of the support (``-inf``/``inf`` where unbounded)."""
        lo_base, hi_base = {"unit_interval": (0.0, 1.0), "positive": (0.0, np.inf)}.get(
            self.base.support, (-np.inf, np.inf)
        )
        with np.errstate(invalid="ignore"):
            ends = (self.loc + self.scale * lo_base, self.loc + self.scale * np.float64(hi_base))
            ends = tuple(np.where(self.scale == 0, self.loc, e) for e in ends)
        return np.minimum(*ends), np.maximum(*ends)

    @property
    def has_fisher(self):
        return self.base.has_fisher

    @property
    def positive_parameters(self):
        return self.base.positive_parameters

    @property
    def shape_parameters(self):
        return self.base.shape_parameters

    @property
    def max_shape(self):
        return self.base.max_shape

    def has_input_moments(self, log_space: bool) -> bool:
        # the input is z itself; on a bounded interval a quadratic in z is a fair expansion
        return self.base.support == "unit_interval" and self.base.has_input_moments(True)

    def input_moments(self, params, log_space: bool):
        """``(E[z], Var[z])`` (the input is ``z`` in either space)."""
        return self.mean(params), self.variance(params)

    def _loc(self, dtype):
        return jnp.asarray(self.loc, dtype)

    def _scale(self, dtype):
        return jnp.asarray(self.scale, dtype)

    def _dtype(self, params):
        return jnp.result_type(*jax.tree_util.tree_leaves(params))

    def init_params(self, rng_key=None, dtype=jnp.float32):
        return self.base.init_params(rng_key, dtype)

    def natural_params(self, params):
        return self.base.natural_params(params)

    def narrowed_params(self, params, factor):
        return self.base.narrowed_params(params, factor)

    def sample_standardized(self, params, rng_key, sample_shape=()):
        return self.base.sample_standardized(params, rng_key, sample_shape)

    def _to_base(self, params, z):
        dtype = self._dtype(params)
        return (z - self._loc(dtype)) / self._scale(dtype)

    def _log_abs_scale(self, params):
        dtype = self._dtype(params)
        return jnp.broadcast_to(jnp.log(jnp.abs(self._scale(dtype))), self.shape)

    def log_prob(self, params, z):
        return self.base.log_prob(params, self._to_base(params, z)) - self._log_abs_scale(params)

    def entropy(self, params):
        return self.base.entropy(params) + self._log_abs_scale(params)

    def mean(self, params):
        dtype = self._dtype(params)
        return self._loc(dtype) + self._scale(dtype) * self.base.mean(params)

    def variance(self, params):
        return self._scale(self._dtype(params)) ** 2 * self.base.variance(params)

    def standardize(self, params, z):
        return self.base.standardize(params, self._to_base(params, z))

    def transform(self, params, eps):
        dtype = self._dtype(params)
        return self._loc(dtype) + self._scale(dtype) * self.base.transform(params, eps)

    def log_abs_det_jacobian(self, params, eps):
        return self.base.log_abs_det_jacobian(params, eps) + self._log_abs_scale(params)

    def log_prob_standardized(self, params, eps):
        return self.base.log_prob_standardized(params, eps)

    def fisher_solve(self, params, grad):
        return self.base.fisher_solve(params, grad)

    def fisher_quad(self, params, delta):
        return self.base.fisher_quad(params, delta)

    def __repr__(self):
        return f"Affine({self.base!r}, loc={self.loc.tolist()}, scale={self.scale.tolist()})"


def _flat_event(x, ndim):
    """``x`` with its last ``ndim`` axes flattened into one (``ndim == 0``: a trailing axis 1)."""
    if ndim == 0:
        return x[..., None]
    return x.reshape(x.shape[: x.ndim - ndim] + (-1,))


@dataclasses.dataclass(frozen=True, eq=False)
class TransformedNormal(Family):
    """A diagonal Normal on the unconstrained space pushed through ``transform`` (module
    docstring); parameters ``{"loc", "scale"}`` of the unconstrained shape (scale through
    softplus).

    Args:
      shape: the latent's (constrained) shape; its last ``constraint.event_dim`` axes are the
        event (e.g. ``(3, 3)`` for one 3 x 3 Cholesky factor).
      constraint: the support, a ``numpyro.distributions.constraints`` constraint.
      transform: the bijection onto it (default ``biject_to(constraint)``).
      init_loc, init_scale: initial parameters on the unconstrained space (``init_loc`` a
        number, or an array of the unconstrained shape).
    """

    constraint: Any = None
    transform_: Any = None
    init_loc: Any = 0.0
    init_scale: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        from numpyro.distributions.transforms import biject_to

        if self.constraint is None:
            raise TypeError("TransformedNormal: constraint is required")
        bijector = self.transform_ if self.transform_ is not None else biject_to(self.constraint)
        object.__setattr__(self, "transform_", bijector)
        event_ndim = int(self.constraint.event_dim)
        if len(self.shape) < event_ndim:
            raise ValueError(
                f"TransformedNormal: shape {self.shape} has fewer axes than the event ({event_ndim})"
            )
        object.__setattr__(self, "event_ndim", event_ndim)
        event = self.shape[len(self.shape) - event_ndim :]
        unconstrained_event = tuple(bijector.inverse_shape(event)) if event_ndim else ()
        object.__setattr__(self, "unconstrained_event_ndim", int(bijector.domain.event_dim))
        object.__setattr__(self, "unconstrained_shape", self.batch_shape + unconstrained_event)
        object.__setattr__(self, "identity", _is_identity(bijector))
        object.__setattr__(self, "ordered", is_ordered(self.constraint))
        object.__setattr__(self, "support", f"transformed({type(self.constraint).__name__.lstrip('_')})")
        _check_separable(bijector, unconstrained_event, self.constraint)

    has_fisher = True
    positive_parameters = ("scale",)

    def init_params(self, rng_key=None, dtype=jnp.float32):
        return {
            "loc": jnp.broadcast_to(jnp.asarray(self.init_loc, dtype), self.unconstrained_shape),
            "scale": numerics.inverse_softplus(jnp.full(self.unconstrained_shape, self.init_scale, dtype)),
        }

    def natural_params(self, params):
        return {"loc": params["loc"], "scale": numerics.softplus(params["scale"])}

    def narrowed_params(self, params, factor):
        return {**params, "scale": numerics.inverse_softplus(numerics.softplus(params["scale"]) * factor)}

    def _event_sum(self, x):
        """Sum over the unconstrained event axes (per batch element)."""
        axes = tuple(range(x.ndim - self.unconstrained_event_ndim, x.ndim))
        return jnp.sum(x, axes) if axes else x

    def sample_standardized(self, params, rng_key, sample_shape=()):
        dtype = jnp.result_type(params["loc"])
        return jax.random.normal(rng_key, tuple(sample_shape) + self.unconstrained_shape, dtype)

    def _unconstrained(self, params, eps):
        return params["loc"] + numerics.softplus(params["scale"]) * eps

    def transform(self, params, eps):
        z = self.transform_(self._unconstrained(params, eps))
        return _strictly_increasing(z) if self.ordered else z

    def standardize(self, params, z):
        return (self.transform_.inv(z) - params["loc"]) / numerics.softplus(params["scale"])

    def _log_det(self, u):
        return self.transform_.log_abs_det_jacobian(u, self.transform_(u))

    def log_abs_det_jacobian(self, params, eps):
        u = self._unconstrained(params, eps)
        return self._log_det(u) + self._event_sum(jnp.log(numerics.softplus(params["scale"])) + 0 * eps)

    def log_prob_standardized(self, params, eps):
        return self._event_sum(-0.5 * eps**2 - HALF_LOG_2PI)

    def log_prob(self, params, z):
        u = self.transform_.inv(z)
        scale = numerics.softplus(params["scale"])
        normal = self._event_sum(-0.5 * ((u - params["loc"]) / scale) ** 2 - jnp.log(scale) - HALF_LOG_2PI)
        return normal - self._log_det(u)

    def expected_log_det(self, params):
        """``E_q[log |det J_T(u)|]`` per batch element: Gauss-Hermite with every coordinate at
        the same node (exact for a log-Jacobian that is a sum over coordinates; checked)."""
        if self.identity:
            return jnp.zeros(self.batch_shape, jnp.result_type(params["loc"]))
        dtype = jnp.result_type(params["loc"])
        nodes = jnp.asarray(np.sqrt(2.0) * _NODES, dtype)
        weights = jnp.asarray(_WEIGHTS / np.sqrt(np.pi), dtype)
        loc, scale = params["loc"], numerics.softplus(params["scale"])
        points = loc + scale * nodes.reshape((-1,) + (1,) * loc.ndim)
        values = jax.vmap(self._log_det)(points)
        return jnp.tensordot(weights, values, axes=1)

    def entropy(self, params):
        scale = numerics.softplus(params["scale"])
        return self._event_sum(0.5 + jnp.log(scale) + HALF_LOG_2PI) + self.expected_log_det(params)

    def _moments(self, params):
        key = jax.random.key(20260)
        eps = self.sample_standardized(jax.lax.stop_gradient(params), key, (MOMENT_DRAWS,))
        draws = self.transform(params, eps)
        return jnp.mean(draws, 0), jnp.var(draws, 0)

    def mean(self, params):
        """``E_q[z]``: exact for the identity transform, else a Monte Carlo estimate."""
        if self.identity:
            return params["loc"]
        return self._moments(params)[0]

    def log_space_mean(self, params):
        """The point where the model is evaluated for the baseline and the checks: the image of
        the unconstrained mean, ``T(loc)``. Not ``E_q[z]``: on a support that is not convex the
        average of draws leaves it (an average of correlation Cholesky factors has rows shorter
        than 1, where ``LKJCholesky`` has no density), and the model is -inf there. An ordered
        latent's log space is ``u`` (below): there the point is ``loc`` itself."""
        if self.identity or self.ordered:
            return params["loc"]
        return self.transform_(params["loc"])

    def variance(self, params):
        if self.identity:
            return numerics.softplus(params["scale"]) ** 2
        return self._moments(params)[1]

    # --- an ordered latent reaches a log-space target as its unconstrained ``u`` ----------
    # Its value ``z`` loses the small gaps in float32 (``z_k = z_{k-1} + exp(u_k)`` rounds to
    # ``z_{k-1}`` below ``u_k`` of about -17 + log|z|): a model's prior evaluated at ``z``
    # inverts the transform to another ``u`` than the draw's. Where the posterior leaves a gap
    # to its prior (a mixture component no data need), the draws are there: an ordered vector
    # whose gaps had ``Normal(0, 10)`` priors and no data fitted ``q`` means of 1.1 and 4.1 and
    # standard deviations of 8.3 and 7.5 where the posterior is the prior, 0 and 10. Given ``u``,
    # the target evaluates such a prior exactly (``grepvi.interop.numpyro_model``), and the
    # model's other terms read ``z``, lifted where it ties (:func:`_strictly_increasing`).

    def log_space_transform(self, params, eps):
        if self.ordered:
            return self._unconstrained(params, eps)
        return super().log_space_transform(params, eps)

    def to_log_space(self, z):
        if self.ordered:
            return self.transform_.inv(z)
        return super().to_log_space(z)

    def value_from_log_space(self, u, bounds_dtype=None):
        if self.ordered:
            return _strictly_increasing(self.transform_(u))
        return super().value_from_log_space(u, bounds_dtype)

    def log_prob_log_space(self, params, u):
        if self.ordered:
            scale = numerics.softplus(params["scale"])
            normal = self._event_sum(
                -0.5 * ((u - params["loc"]) / scale) ** 2 - jnp.log(scale) - HALF_LOG_2PI
            )
            return normal - self._log_det(u)
        return super().log_prob_log_space(params, u)

    def fisher_solve(self, params, grad):
        fisher = gaussian_fisher_diagonal(params)
        natural = {key: grad[key] / fisher[key] for key in fisher}
        return natural, self._event_sum(sum(grad[key] * natural[key] for key in fisher))

    def fisher_quad(self, params, delta):
        fisher = gaussian_fisher_diagonal(params)
        return self._event_sum(sum(fisher[key] * delta[key] ** 2 for key in fisher))

    def __repr__(self):
        return f"TransformedNormal(shape={self.shape}, constraint={self.constraint})"


def is_ordered(constraint) -> bool:
    """Whether ``constraint`` (a NumPyro constraint, under ``independent``) is an ordered
    vector or a positive ordered one."""
    from numpyro.distributions import constraints

    while isinstance(constraint, constraints.independent):
        constraint = constraint.base_constraint
    kinds = (type(constraints.ordered_vector), type(constraints.positive_ordered_vector))
    return isinstance(constraint, kinds)


def _strictly_increasing(z):
    """``z`` (increasing along its last axis) with each element at least the next float above
    the one before it.

    An ordered vector's element is the one before plus ``exp(u)``: where ``u`` is below about
    -17 the sum rounds to the element before in float32, and the model's own prior, which
    inverts the transform, takes ``log(0)``. A mixture whose component was not needed had its
    log-gap's ``q`` at a mean of -9 and a standard deviation of 15: half the draws gave a
    prior of -inf and a NaN gradient, the steps were skipped, the step halved to 2e-4, and the
    fit ran 188,000 iterations unconverged. Lifted to the next float, the prior is evaluated at
    a gap of one rounding unit (its log about -17 instead of ``u``): finite, and the same
    wherever the elements were already apart. A lifted element keeps the derivative in the
    one before (1, as the sum's) and loses the one in its own ``u`` (``exp(u)``, below float32's
    resolution there in any case)."""
    if z.shape[-1] < 2:
        return z
    items = [z[..., 0]]
    for k in range(1, z.shape[-1]):
        before = items[-1]
        fixed = jax.lax.stop_gradient(before)
        unit = jnp.nextafter(fixed, jnp.asarray(jnp.inf, z.dtype)) - fixed
        items.append(jnp.maximum(z[..., k], before + unit))  # moves with the one before, as z does
    return jnp.stack(items, axis=-1)


def _is_identity(bijector) -> bool:
    from numpyro.distributions import transforms

    while isinstance(bijector, transforms.IndependentTransform):
        bijector = bijector.base_transform
    return isinstance(bijector, transforms.IdentityTransform)


def _check_separable(bijector, unconstrained_event, constraint):
    """Raises ValueError unless ``log |det J|`` of one event is a sum over its coordinates
    (the Hessian at a random point is diagonal)."""
    if _is_identity(bijector):
        return
    size = int(np.prod(unconstrained_event)) if unconstrained_event else 1
    if size == 1:
        return

    def log_det(flat):
        x = flat.reshape(unconstrained_event)
        return jnp.sum(bijector.log_abs_det_jacobian(x, bijector(x)))

    def hessian_at_random_point():
        return jax.hessian(log_det)(jax.random.normal(jax.random.key(7), (size,), jnp.float32) * 0.7)

    # One compiled program, the random point in it: op by op, the Hessian of a 3x3 Cholesky
    # factor's log-Jacobian dispatched for 5 s on CPU (under a second compiled); the point
    # drawn outside it cost two more programs (0.14 s on an ordered vector).
    hessian = np.asarray(jax.jit(hessian_at_random_point)(), np.float64)
    off = hessian - np.diag(np.diag(hessian))
    if np.max(np.abs(off)) > 1e-3 * (1.0 + np.max(np.abs(np.diag(hessian)))):
        raise ValueError(
            f"TransformedNormal: the log-Jacobian of {type(bijector).__name__} (support {constraint}) "
            "is not a sum over coordinates, so its entropy has no quadrature form here; give a family "
            "of your own"
        )

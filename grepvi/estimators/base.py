"""What every gradient estimator shares: the target, the estimator record, a registry.

An estimator is a pure function ``estimate(rng_key, params, target) -> (grad, info)`` that
returns an estimate of the gradient of the ELBO with respect to the unconstrained
variational parameters (a pytree like ``params``) and an :class:`EstimateInfo`. Estimators
that use a different variational family than the user's (ADVI's Gaussians on the
unconstrained space) say so with ``adapt_families``. An estimator may also carry a state
from step to step (:class:`CarriedState`: G-REP's running baseline), which the step keeps in
:class:`grepvi.inference.state.VIState` (checkpointed with the rest of a run).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from grepvi.errors import ConfigError
from grepvi.families.base import Family
from grepvi.fusion_boundary import SMALL_TREE_ELEMENTS, computed_once, predicate_of
from grepvi.target import Target

__all__ = [
    "EstimateInfo",
    "CarriedState",
    "Estimator",
    "register_estimator",
    "get_estimator",
    "estimator_names",
    "sample_standardized",
    "transform_all",
    "total_entropy",
]


class EstimateInfo(NamedTuple):
    """Per-call diagnostics: the ELBO estimate from the same draws, and extras."""

    elbo: jax.Array
    extras: dict = {}


class CarriedState(NamedTuple):
    """An estimator's state carried from one step to the next (e.g. a control variate's running
    average), as pure functions:

    * ``init(families, log_space) -> state``: before the first step (``log_space``: the
      target's, :class:`~grepvi.target.Target`);
    * ``estimate(rng_key, params, target, state) -> (grad, EstimateInfo, statistics)``: the
      estimate given the state, and what the draws tell the state (a pytree of floats, which
      a step that averages several estimates averages too);
    * ``advance(state, statistics) -> state``: the state for the next step.

    ``estimate`` may use the state only through values that do not depend on the step's own
    draws, so the estimate stays unbiased whatever the state holds.
    """

    init: Callable[[dict[str, Family], bool], Any]
    estimate: Callable[[Any, dict, Target, Any], tuple[dict, EstimateInfo, Any]]
    advance: Callable[[Any, Any], Any]


class Estimator(NamedTuple):
    """A named gradient estimator.

    Attributes:
      name: registry name.
      estimate: ``(rng_key, params, target) -> (grad, EstimateInfo)``; ``grad`` ascends the ELBO.
      adapt_families: maps the user's families to the ones this estimator optimizes.
      options: the keyword options it was built with (for logs and config files).
      carried: the estimate given a state carried between steps (:class:`CarriedState`), or
        None. The plain step uses it where its state holds one (``grepvi.inference.state.init``
        with the estimator); ``estimate`` is the same estimator without a history (minibatch
        and data-parallel steps, diagnostics).
    """

    name: str
    estimate: Callable[[Any, dict, Target], tuple[dict, EstimateInfo]]
    adapt_families: Callable[[dict[str, Family]], dict[str, Family]] = lambda families: families
    options: dict = {}
    carried: CarriedState | None = None


_REGISTRY: dict[str, Callable[..., Estimator]] = {}


def register_estimator(name: str, factory: Callable[..., Estimator] | None = None):
    """Registers ``factory(**options) -> Estimator`` under ``name`` (usable as a decorator)."""

    def decorator(function):
        _REGISTRY[name] = function
        return function

    return decorator if factory is None else decorator(factory)


def estimator_names() -> tuple[str, ...]:
    # The built-in estimators register themselves: ``grepvi.estimators`` (this module's parent
    # package, always imported first) imports them.
    return tuple(sorted(_REGISTRY))


def get_estimator(name_or_estimator, **options) -> Estimator:
    """The estimator registered as ``name`` built with ``options`` (or an Estimator as is)."""
    if isinstance(name_or_estimator, Estimator):
        return name_or_estimator
    if name_or_estimator not in _REGISTRY:
        raise ConfigError(
            f"estimator: unknown name {name_or_estimator!r}; expected one of {estimator_names()}"
        )
    try:
        return _REGISTRY[name_or_estimator](**options)
    except TypeError as error:
        raise ConfigError(f"estimator {name_or_estimator!r}: bad options {options}: {error}") from error


# --- helpers shared by estimators ---------------------------------------------------------


def sample_standardized(rng_key, params, families, sample_shape=()):
    """One standardized draw ``eps = T^{-1}(z; v)`` per latent, no gradient; the gamma draws of
    every latent from one call of the sampler (:func:`grepvi.sampling.with_one_gamma_draw`).

    Up to :data:`~grepvi.fusion_boundary.SMALL_TREE_ELEMENTS` elements the draws are computed
    once into memory (:func:`~grepvi.fusion_boundary.computed_once`, its predicate from
    ``params``, unbatched where the draws are vmapped): the transform, the log joint's
    derivative, the correction and the entropy each read them, and XLA otherwise recomputed a
    normal's ``erf_inv`` inside each of its consumers.
    """
    from grepvi.sampling import with_one_gamma_draw

    def draw(key):
        keys = jax.random.split(key, len(families))
        return {
            name: family.sample_standardized(params[name], key, sample_shape)
            for key, (name, family) in zip(keys, sorted(families.items()), strict=True)
        }

    eps = with_one_gamma_draw(draw, rng_key)
    return computed_once(eps, predicate_of(params), SMALL_TREE_ELEMENTS)


def transform_all(params, eps, families, log_space: bool = False):
    """``z = T(eps; v)`` for every latent; in the log space of its support with ``log_space``
    (what a target with ``log_space=True`` receives)."""
    if log_space:
        return {
            name: family.log_space_transform(params[name], eps[name]) for name, family in families.items()
        }
    return {name: family.transform(params[name], eps[name]) for name, family in families.items()}


def total_entropy(params, families):
    """Sum of the analytic entropies of all latents."""
    return sum(jnp.sum(family.entropy(params[name])) for name, family in families.items())

"""What every gradient estimator shares: the target, the estimator record, a registry.

An estimator is a pure function ``estimate(rng_key, params, target) -> (grad, info)`` that
returns an estimate of the gradient of the ELBO with respect to the unconstrained
variational parameters (a pytree like ``params``) and an :class:`EstimateInfo`. Estimators
that use a different variational family than the user's (ADVI's Gaussians on the
unconstrained space) say so with ``adapt_families``.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from grepvi.errors import ConfigError
from grepvi.families.base import Family, from_log_space

__all__ = [
    "Target",
    "bind_data",
    "EstimateInfo",
    "Estimator",
    "register_estimator",
    "get_estimator",
    "estimator_names",
    "local_log_joints",
    "sample_standardized",
    "transform_all",
    "inputs_at_means",
    "inputs_from_values",
    "values_from_inputs",
    "value_space",
    "total_entropy",
]


class Target(NamedTuple):
    """What the estimators differentiate.

    Attributes:
      logdensity_fn: ``log p(x, z)`` as a function of a dict of latent arrays; with
        ``takes_data`` a function ``(latents, data)`` of the latents and the data pytree.
      families: the variational family of each latent, keyed like the dict.
      local_logdensity_fn: optional; maps the latent dict (and the data, with ``takes_data``)
        to a dict of per-element local log joints (each latent's Markov blanket, batch shape
        of its family). Without it every element uses the whole log joint, which is unbiased
        but noisier.
      takes_data: the functions take the data as their second argument. A compiled step
        then receives the data as an argument (:func:`bind_data` inside the program), so the
        data is never a constant of the program: the same compiled step serves other data of
        the same shapes (test rows, minibatches, shards on other devices).

    The estimators see a target whose functions take the latents only (:func:`bind_data`).

      log_space: the functions receive every latent in the log space of its support
        (:meth:`~grepvi.families.base.Family.log_space_transform`): ``log z`` for positive
        and simplex latents, ``logit z`` for the unit interval, ``z`` on the real line. The
        estimators then hand the model the exact draws the families make (in log space)
        instead of ``z`` clamped to float's range: a gamma draw of ``1e-45`` or a beta draw
        within ``1e-9`` of 1 reaches the model intact. The built-in models are written so.
    """

    logdensity_fn: Callable[..., jax.Array]
    families: dict[str, Family]
    local_logdensity_fn: Callable[..., dict] | None = None
    takes_data: bool = False
    bound_data: Any = None  # the data bound by bind_data (for estimators that wrap others)
    log_space: bool = False


def bind_data(target: Target, data) -> Target:
    """The target with ``data`` bound: functions of the latents only, as the estimators expect.

    Call it inside the compiled function that receives ``data`` as an argument (then ``data``
    is a tracer, not a constant of the program). A target without ``takes_data`` is returned
    as is (``data`` must then be ``None``).
    """
    if not target.takes_data:
        if data is not None:
            raise ConfigError(
                "data: this target's logdensity_fn takes the latents only, found data "
                f"{type(data).__name__}; build the target with takes_data=True for "
                "logdensity_fn(latents, data)"
            )
        return target
    if data is None:
        raise ConfigError("data: this target's logdensity_fn takes (latents, data); found no data")
    logdensity_fn, local_fn = target.logdensity_fn, target.local_logdensity_fn
    return Target(
        lambda latents: logdensity_fn(latents, data),
        target.families,
        None if local_fn is None else (lambda latents: local_fn(latents, data)),
        bound_data=data,
        log_space=target.log_space,
    )


class EstimateInfo(NamedTuple):
    """Per-call diagnostics: the ELBO estimate from the same draws, and extras."""

    elbo: jax.Array
    extras: dict = {}


class Estimator(NamedTuple):
    """A named gradient estimator.

    Attributes:
      name: registry name.
      estimate: ``(rng_key, params, target) -> (grad, EstimateInfo)``; ``grad`` ascends the ELBO.
      adapt_families: maps the user's families to the ones this estimator optimizes.
      options: the keyword options it was built with (for logs and config files).
    """

    name: str
    estimate: Callable[[Any, dict, Target], tuple[dict, EstimateInfo]]
    adapt_families: Callable[[dict[str, Family]], dict[str, Family]] = lambda families: families
    options: dict = {}


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
    """One standardized draw ``eps = T^{-1}(z; v)`` per latent, no gradient."""
    keys = jax.random.split(rng_key, len(families))
    return {
        name: family.sample_standardized(params[name], key, sample_shape)
        for key, (name, family) in zip(keys, sorted(families.items()), strict=True)
    }


def transform_all(params, eps, families, log_space: bool = False):
    """``z = T(eps; v)`` for every latent; in the log space of its support with ``log_space``
    (what a target with ``log_space=True`` receives)."""
    if log_space:
        return {
            name: family.log_space_transform(params[name], eps[name]) for name, family in families.items()
        }
    return {name: family.transform(params[name], eps[name]) for name, family in families.items()}


def inputs_from_values(values: dict, families, log_space: bool) -> dict:
    """Latent values ``z`` as the target takes them (:meth:`Family.to_log_space` with
    ``log_space``); for values that exist only as ``z`` (means, user points)."""
    if not log_space:
        return values
    return {
        name: families[name].to_log_space(value) if name in families else value
        for name, value in values.items()
    }


def inputs_at_means(params: dict, families: dict, log_space: bool) -> dict:
    """The variational means ``E_q[z]`` as the target takes them: ``family.mean`` for a
    value-space target, ``family.log_space_mean`` (no overflow of the mean) for a log-space one."""
    if log_space:
        return {name: family.log_space_mean(params[name]) for name, family in families.items()}
    return {name: family.mean(params[name]) for name, family in families.items()}


def values_from_inputs(inputs: dict, families, log_space: bool) -> dict:
    """The inverse of :func:`inputs_from_values` (``z`` from what the target takes)."""
    if not log_space:
        return inputs
    return {
        name: from_log_space(value, families[name].support) if name in families else value
        for name, value in inputs.items()
    }


def value_space(target: Target) -> Target:
    """``target`` as a function of the values ``z`` (for estimators that need ``d f / d z``).

    A log-space target is composed with :func:`inputs_from_values`; the values are then
    clamped by the families as before (``z >= 1e-30``, ``1 - z >= 1.6e-7`` in float32)."""
    if not target.log_space:
        return target
    families, full, local = target.families, target.logdensity_fn, target.local_logdensity_fn
    convert = lambda values: inputs_from_values(values, families, True)  # noqa: E731
    if target.takes_data:
        return target._replace(
            logdensity_fn=lambda z, data: full(convert(z), data),
            local_logdensity_fn=None if local is None else (lambda z, data: local(convert(z), data)),
            log_space=False,
        )
    return target._replace(
        logdensity_fn=lambda z: full(convert(z)),
        local_logdensity_fn=None if local is None else (lambda z: local(convert(z))),
        log_space=False,
    )


def total_entropy(params, families):
    """Sum of the analytic entropies of all latents."""
    return sum(jnp.sum(family.entropy(params[name])) for name, family in families.items())


def local_log_joints(target: Target, latents: dict) -> dict:
    """Per-element local log joint ``f_i(z)`` of every latent (batch shape of its family).

    Uses ``target.local_logdensity_fn`` when given; otherwise broadcasts the whole log joint
    (the plain, unbiased fallback).
    """
    if target.local_logdensity_fn is not None:
        return target.local_logdensity_fn(latents)
    total = target.logdensity_fn(latents)
    return {name: jnp.broadcast_to(total, family.batch_shape) for name, family in target.families.items()}

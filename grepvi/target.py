"""What the estimators differentiate and the models describe: the :class:`Target`.

A target bundles ``log p(x, z)`` (and optionally each latent element's local log joint, its
Markov blanket) with the variational family of every latent. Models build targets
(``model.target()``); estimators differentiate them; both import this module, neither the
other.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from grepvi.errors import ConfigError
from grepvi.families.base import Family

__all__ = [
    "Target",
    "bind_data",
    "latent_names",
    "inputs_from_values",
    "inputs_at_means",
    "values_from_inputs",
    "value_space",
    "local_log_joints",
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
      location_hessian: set by the step (:func:`grepvi.inference.state.step`) where the
        default procedure couples the locations of the real-valued Gaussian factors
        (:mod:`grepvi.optim.coupling`); None otherwise.
      members: for a target on stacked latents (:mod:`grepvi.inference.stacking`), each
        stacked latent's members ``((name, size), ...)`` in the order of its elements: the step
        then reports a non-finite gradient per latent of the model (:func:`latent_names`).
    """

    logdensity_fn: Callable[..., jax.Array]
    families: dict[str, Family]
    local_logdensity_fn: Callable[..., dict] | None = None
    takes_data: bool = False
    bound_data: Any = None  # the data bound by bind_data (for estimators that wrap others)
    log_space: bool = False
    members: dict | None = None
    # (H, on) or None: where on, the real-valued Gaussian factors' locations take the model's
    # path derivative less H (z - mu) (coupled steps, grepvi.optim.coupling); set by the step
    # from the optimizer state, never by a model
    location_hessian: Any = None


def latent_names(target: Target) -> tuple[str, ...]:
    """The names of the model's latents in the order of the step's per-latent reports
    (``StepInfo.nonfinite_latents``): the target's latents in sorted order, a stacked one
    replaced by its members (``target.members``)."""
    members = target.members or {}
    return tuple(
        member
        for name in sorted(target.families)
        for member in ((name,) if name not in members else tuple(m for m, _ in members[name]))
    )


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
        members=target.members,
    )


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
        name: families[name].value_from_log_space(value) if name in families else value
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


def local_log_joints(target: Target, latents: dict) -> dict:
    """Per-element local log joint ``f_i(z)`` of every latent (batch shape of its family).

    Uses ``target.local_logdensity_fn`` when given; otherwise broadcasts the whole log joint
    (the plain, unbiased fallback).
    """
    if target.local_logdensity_fn is not None:
        return target.local_logdensity_fn(latents)
    total = target.logdensity_fn(latents)
    return {name: jnp.broadcast_to(total, family.batch_shape) for name, family in target.families.items()}

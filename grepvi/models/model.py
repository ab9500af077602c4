"""A model and its data: the log joint over named axes, and what evaluation needs.

A :class:`Model` *describes*: its log joint and local log joints are functions
``(latents, data)`` (:mod:`grepvi.models.factors`), and ``data`` is the pytree of arrays it
was built with (``{"x": (N, D) observations, ...}``, each array's axes in ``data_axes``, the
observation axis ``"n"`` first). Programs take the data as an argument: ``fit`` and the
command line pass ``model.data``; held-out evaluation passes ``model.prepare_data(x_test)``
to the same compiled programs; a minibatch passes rows of it; a device mesh shards it.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from grepvi.errors import ConfigError
from grepvi.families.base import Family, to_log_space
from grepvi.models.factors import LogJoint
from grepvi.target import Target

__all__ = ["Model", "OBSERVATION_AXIS", "ValueSpaceFunctions", "value_space_functions"]

OBSERVATION_AXIS = "n"


class Model(NamedTuple):
    """A model built from its sizes and hyperparameters, with its data.

    Attributes:
      name: e.g. ``"sparse_gamma_def"``.
      data: the data pytree (``{"x": (N, D) float32, ...}``), arrays named in ``data_axes``.
      joint: the :class:`~grepvi.models.LogJoint` (factors, axes, blankets).
      logdensity_fn: ``(latents, data) -> log p(x, z)`` (scalar).
      local_logdensity_fn: ``(latents, data) -> {name: per-element local log joint}``.
      logdensity_and_local_fn: both from one evaluation of the factors.
      latents: ``() -> {name: Family}``, the default variational families (as in the paper).
      local_latent_names: latents with the observation axis ``"n"`` (one row per
        observation, refit for held-out data).
      global_latent_names: the others (weights), shared by all observations.
      observation_loglik: ``(latents, data) -> (N, D)`` per-entry ``log p(x_nd | latents)``
        for a data pytree (``prepare_data(x)`` for held-out ``x``; the local latents must
        have its number of rows).
      mean_observation: ``latents -> (N, D)`` ``E[x_nd | latents]`` (Poisson rate, Bernoulli
        probability), for reconstructions.
      sample: ``(rng_key, num_observations=None) -> (x, latents)``, a draw of the
        generative process (``x`` float32, ``N`` rows unless ``num_observations``).
      prepare_data: ``x -> data pytree``: validates an ``(N, D)`` observation matrix for
        this model (:class:`~grepvi.DataError` naming what is wrong) and computes what the
        factors read (e.g. ``log x!``).
      with_data: ``x -> Model``, the same model (hyperparameters) with other observations.
      hyperparameters: the constructor's keyword arguments.
      log_space: the factors (``joint``'s functions and ``log_space_observation_loglik``)
        take every latent in the log space of its support (``log z``, ``logit z``; see
        :class:`~grepvi.Target`). ``target()`` hands them the families' exact log-space
        draws; ``logdensity_fn``, ``observation_loglik`` and ``mean_observation`` above take
        values ``z`` and convert (for checks and interactive use).
      log_space_observation_loglik: ``observation_loglik`` of log-space latents.
    """

    name: str
    data: dict
    joint: LogJoint
    logdensity_fn: Callable[[dict, dict], jax.Array]
    local_logdensity_fn: Callable[[dict, dict], dict]
    logdensity_and_local_fn: Callable[[dict, dict], tuple[jax.Array, dict]]
    latents: Callable[[], dict[str, Family]]
    local_latent_names: tuple[str, ...]
    global_latent_names: tuple[str, ...]
    observation_loglik: Callable[[dict, dict], jax.Array]
    mean_observation: Callable[[dict], jax.Array]
    sample: Callable[..., tuple[jax.Array, dict]]
    prepare_data: Callable[[Any], dict]
    with_data: Callable[[Any], "Model"]
    hyperparameters: dict
    log_space: bool = False
    log_space_observation_loglik: Callable[[dict, dict], jax.Array] | None = None

    @property
    def observations(self) -> jax.Array:
        """The ``(N, D)`` observation matrix (``data["x"]``)."""
        return self.data["x"]

    @property
    def num_observations(self) -> int:
        return int(self.data["x"].shape[0])

    @property
    def data_axes(self) -> dict[str, tuple[str, ...]]:
        return self.joint.data_axes

    @property
    def latent_axes(self) -> dict[str, tuple[str, ...]]:
        return self.joint.latent_axes

    @property
    def latent_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: self.joint.latent_shape(name) for name in self.joint.latent_axes}

    def target(self, families: dict[str, Family] | None = None, use_local: bool = True) -> Target:
        """The :class:`~grepvi.Target` (functions of ``(latents, data)``; pass ``model.data``
        to the step). Default families unless given."""
        families = self.latents() if families is None else dict(families)
        if not self.log_space:
            return Target(
                self.logdensity_fn, families, self.local_logdensity_fn if use_local else None, takes_data=True
            )
        self.check_supports(families)
        return self.joint.target(families, use_local)

    def check_supports(self, families: dict[str, Family]) -> None:
        """Raises ``ConfigError`` where a family's support differs from the default family's:
        the log-space factors would read its draws in the wrong space."""
        defaults = self.latents()
        for name, family in families.items():
            expected = defaults[name].support if name in defaults else None
            if expected is not None and family.support != expected:
                raise ConfigError(
                    f"latents[{name!r}]: {type(family).__name__} has support {family.support!r}; "
                    f"{self.name} needs a family on {expected!r} for {name!r}"
                )

    def bound(self, data: dict | None = None):
        """``(logdensity_fn, local_logdensity_fn)`` of the latents only, with ``data`` (default
        the model's) bound: for interactive use and checks, not for compiled loops (the data
        would be a constant of the program)."""
        data = self.data if data is None else data
        return (
            lambda latents: self.logdensity_fn(latents, data),
            lambda latents: self.local_logdensity_fn(latents, data),
        )


class ValueSpaceFunctions(NamedTuple):
    """A log-space model's functions of the values ``z`` (what ``Model`` exposes as
    ``logdensity_fn`` etc.)."""

    logdensity_fn: Callable
    local_logdensity_fn: Callable
    logdensity_and_local_fn: Callable
    observation_loglik: Callable
    mean_observation: Callable


def value_space_functions(
    joint: LogJoint, supports: dict[str, str], log_space_observation_loglik, log_space_mean_observation
) -> ValueSpaceFunctions:
    """The functions of values ``z`` of a model whose factors take log-space latents:
    each is the log-space function after :func:`~grepvi.families.base.to_log_space` of the
    latents (``supports``: each latent's support)."""

    def convert(latents):
        return {
            name: to_log_space(value, supports[name]) if name in supports else value
            for name, value in latents.items()
        }

    return ValueSpaceFunctions(
        lambda latents, data: joint.logdensity_fn(convert(latents), data),
        lambda latents, data: joint.local_logdensity_fn(convert(latents), data),
        lambda latents, data: joint.logdensity_and_local_fn(convert(latents), data),
        lambda latents, data: log_space_observation_loglik(convert(latents), data),
        lambda latents: log_space_mean_observation(convert(latents)),
    )

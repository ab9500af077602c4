"""The models the command line and the experiments know by name: a registry, not if/else.

A :class:`ModelSpec` says how to build a model from data and a run's options, which
likelihood its data has (for validation and loaders), which of the run's options are its
hyperparameters (the others are left out of a run's identity), and the hyperparameters of the
model that simulates the ``synthetic`` data set. :func:`register_model` adds a user's model.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

from grepvi.errors import ConfigError

__all__ = ["ModelSpec", "register_model", "get_model_spec", "model_names"]


class ModelSpec(NamedTuple):
    """How to build a named model.

    Attributes:
      name: e.g. ``"sparse-gamma-def"``.
      builder: ``(data, **hyperparameters) -> Model``.
      likelihood: ``"poisson"`` or ``"bernoulli"`` (what its data must be).
      options: ``{hyperparameter: run option}``, e.g. ``{"layer_sizes": "layer_sizes"}``.
      synthetic_hyperparameters: fixed hyperparameters of the model that simulates the
        ``synthetic`` data set (the fitted model keeps its defaults).
    """

    name: str
    builder: Callable[..., Any]
    likelihood: str
    options: dict
    synthetic_hyperparameters: dict = {}

    def build(self, data, config, extra: dict | None = None):
        """The model on ``data`` with the hyperparameters read from ``config`` (a run's options)."""
        arguments = {key: getattr(config, option) for key, option in self.options.items()}
        return self.builder(data, **arguments, **(extra or {}))


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Adds ``spec`` under ``spec.name`` (replacing a model of that name)."""
    _REGISTRY[spec.name] = spec
    return spec


def model_names() -> tuple[str, ...]:
    _load_builtin()
    return tuple(_REGISTRY)


def get_model_spec(name: str) -> ModelSpec:
    _load_builtin()
    if name not in _REGISTRY:
        raise ConfigError(f"model: unknown model {name!r}; expected one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def _load_builtin():
    if _REGISTRY:
        return
    from grepvi.models.beta_gamma_mf import beta_gamma_mf
    from grepvi.models.sparse_gamma_def import sparse_gamma_def

    register_model(
        ModelSpec(
            "sparse-gamma-def",
            sparse_gamma_def,
            "poisson",
            {"layer_sizes": "layer_sizes"},
            # The paper's priors (shape 0.1) give rows that are almost all zeros with a few
            # counts in the hundreds; these give counts of a few units (about 40% zeros),
            # images worth looking at. The fitted model keeps the paper's priors.
            {"alpha_z": 1.0, "weight_shape": 0.3, "weight_rate": 1.0, "top_shape": 1.0, "top_rate": 1.0},
        )
    )
    register_model(ModelSpec("beta-gamma-mf", beta_gamma_mf, "bernoulli", {"num_factors": "num_factors"}))

"""grepvi: variational inference with generalized reparameterization gradients on JAX.

Ruiz, Titsias & Blei (2016). The Generalized Reparameterization Gradient. NeurIPS.
"""

from grepvi import diagnostics, errors, models
from grepvi.diagnostics import ParetoK, pareto_k
from grepvi.errors import ConfigError, DataError, GrepviError, ModelError, NumericalError
from grepvi.estimators import EstimateInfo, Estimator, estimator_names, get_estimator, register_estimator
from grepvi.families import (
    Beta,
    Dirichlet,
    Family,
    Gamma,
    GeneralizedDirichlet,
    LogitNormal,
    LogNormal,
    Normal,
    Posterior,
    SimplexNormal,
)
from grepvi.inference.controller import AdaptiveSettings, Convergence
from grepvi.inference.driver import RunState, WindowEvent
from grepvi.inference.fitting import FitResult, fit
from grepvi.inference.state import StepInfo, Trace, VIState, init, make_target, step
from grepvi.models import Factor, Model, beta_gamma_mf, log_joint, sparse_gamma_def
from grepvi.optim.advi import advi_stepsize, scale_by_advi_stepsize
from grepvi.target import Target

__version__ = "0.1.0"

__all__ = [
    "errors",
    "GrepviError",
    "ConfigError",
    "DataError",
    "ModelError",
    "NumericalError",
    "Family",
    "Posterior",
    "Gamma",
    "LogNormal",
    "Beta",
    "Dirichlet",
    "GeneralizedDirichlet",
    "Normal",
    "LogitNormal",
    "SimplexNormal",
    "Target",
    "Estimator",
    "EstimateInfo",
    "estimator_names",
    "get_estimator",
    "register_estimator",
    "VIState",
    "StepInfo",
    "Trace",
    "FitResult",
    "AdaptiveSettings",
    "Convergence",
    "RunState",
    "WindowEvent",
    "init",
    "step",
    "fit",
    "make_target",
    "advi_stepsize",
    "scale_by_advi_stepsize",
    "diagnostics",
    "pareto_k",
    "ParetoK",
    "models",
    "Model",
    "Factor",
    "log_joint",
    "sparse_gamma_def",
    "beta_gamma_mf",
]

"""Gradient estimators of the ELBO, one per module, selected by name."""

from grepvi.estimators.base import (
    EstimateInfo,
    Estimator,
    Target,
    estimator_names,
    get_estimator,
    register_estimator,
)
from grepvi.estimators.grep import grep
from grepvi.estimators.grep_closed_form import grep_closed_form

__all__ = [
    "EstimateInfo",
    "Estimator",
    "Target",
    "estimator_names",
    "get_estimator",
    "register_estimator",
    "grep",
    "grep_closed_form",
]

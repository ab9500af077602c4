"""Gradient estimators of the ELBO, one per module, selected by name."""

from grepvi.estimators.advi import advi
from grepvi.estimators.base import EstimateInfo, Estimator, estimator_names, get_estimator, register_estimator
from grepvi.estimators.bbvi import bbvi
from grepvi.estimators.grep import grep
from grepvi.estimators.grep_closed_form import grep_closed_form
from grepvi.estimators.implicit import implicit
from grepvi.estimators.rsvi import rsvi

__all__ = [
    "EstimateInfo",
    "Estimator",
    "estimator_names",
    "get_estimator",
    "register_estimator",
    "grep",
    "grep_closed_form",
    "bbvi",
    "advi",
    "implicit",
    "rsvi",
]

"""Variational families: one per module, each with the G-REP standardization."""

from grepvi.families.base import Family, Posterior
from grepvi.families.beta import Beta
from grepvi.families.dirichlet import Dirichlet
from grepvi.families.gamma import Gamma
from grepvi.families.generalized_dirichlet import GeneralizedDirichlet
from grepvi.families.logitnormal import LogitNormal
from grepvi.families.lognormal import LogNormal
from grepvi.families.normal import Normal
from grepvi.families.simplex_normal import SimplexNormal

__all__ = [
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
]

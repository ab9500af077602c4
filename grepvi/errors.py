"""Exceptions raised by grepvi.

Every error a user can cause by what they pass in (a file, an array, an option) is a
:class:`GrepviError`, so the command line can print its message without a traceback. The
message names the argument, what was expected and what was found.
"""

__all__ = [
    "GrepviError",
    "DataError",
    "ConfigError",
    "ModelError",
    "NumericalError",
    "NonFiniteStepWarning",
    "FlatLatentWarning",
    "ParamSiteWarning",
    "CentredSiteWarning",
]


class GrepviError(Exception):
    """Base class for errors caused by user input; the CLI prints these without a traceback."""


class DataError(GrepviError, ValueError):
    """A data file or array is missing, malformed, or has values the model cannot take."""


class ConfigError(GrepviError, ValueError):
    """An option, name, or run configuration is invalid or inconsistent."""


class ModelError(GrepviError, ValueError):
    """A model and its variational families do not fit together (shapes, support, finiteness)."""


class NumericalError(GrepviError, FloatingPointError):
    """A non-finite value would reach the variational parameters."""


class NonFiniteStepWarning(RuntimeWarning):
    """Some steps had a non-finite gradient and were skipped (the parameters did not move)."""


class NotConvergedWarning(RuntimeWarning):
    """``fit`` reached its iteration or time cap before the convergence rule was met."""


class CentredSiteWarning(NotConvergedWarning):
    """A NumPyro model's fit stopped without converging, its error or its stages' drift in a
    centred site (a location-scale latent whose location or scale reads other latents, as
    ``b ~ Normal(0, sigma)``) or the latents it reads: mean-field ``q`` of a centred hierarchy
    can slide as the scale's ``q`` shrinks, and the site written non-centred
    (``numpyro.handlers.reparam`` with ``LocScaleReparam(0)``; a ``MultivariateNormal`` whose
    mean or covariance is latent whitened by hand, ``loc + cholesky(cov) z``) may settle. The
    message names the sites and the lines."""


class FlatLatentWarning(RuntimeWarning):
    """The model's log density does not change with a latent at a draw of ``q``: it is
    piecewise constant in it (e.g. ``jnp.where`` on a comparison with the latent) or does not
    read it, and a gradient-based fit cannot place it."""


class ParamSiteWarning(UserWarning):
    """A NumPyro model has ``numpyro.param`` sites: :func:`~grepvi.interop.numpyro_model.from_numpyro`
    holds them at their initial values (as NumPyro's MCMC does); NumPyro's SVI would optimize
    them."""

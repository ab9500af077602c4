"""A fit result as an ArviZ ``InferenceData``, and PSIS from ArviZ.

ArviZ is an optional extra (``pip install 'grepvi[arviz]'``). :func:`to_inference_data` draws
from the fitted ``q`` and builds:

* ``posterior``: one variable per latent, ``(chain=1, draw, *latent dims)``, dims named by
  the model's axes where known (a grepvi model's ``latent_axes``, a NumPyro model's plates);
* ``sample_stats``: the ELBO trace and its wall time, ``(chain=1, draw=iteration)`` (ArviZ's
  group for per-iteration statistics of the algorithm);
* ``observed_data``: the model's observations when given.

:func:`psis_pareto_k` is the PSIS Pareto ``k`` of ``q`` computed by ArviZ (``az.psislw``); grepvi
falls back to its own generalized Pareto fit (:func:`grepvi.diagnostics.pareto.pareto_k`) when ArviZ
is not installed.
"""

import jax
import numpy as np

__all__ = ["to_inference_data", "posterior_draws", "psis_pareto_k"]


def _arviz():
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.2x announces its 1.0 refactor
            import arviz
    except ImportError as error:  # pragma: no cover - the extra is not installed
        raise ImportError("grepvi.interop.arviz_io needs ArviZ: pip install 'grepvi[arviz]'") from error
    return arviz


def posterior_draws(result, num_draws: int, seed: int) -> dict:
    """``num_draws`` draws of every latent of a :class:`~grepvi.FitResult`'s ``q``, one key per
    latent (split from ``seed``, in the latents' sorted order)."""
    keys = jax.random.split(jax.random.key(seed), len(result.posterior))
    return {
        name: result.posterior[name].sample(key, num_draws)
        for key, name in zip(keys, sorted(result.posterior), strict=True)
    }


def to_inference_data(
    result, num_draws: int = 1000, seed: int = 0, latent_axes=None, observed=None, deterministic=None
):
    """``InferenceData`` of a :class:`~grepvi.FitResult` (draws from ``q``, ELBO trace).

    Args:
      result: what :func:`grepvi.fit` returned.
      num_draws: draws from the fitted ``q`` per latent.
      seed: their key.
      latent_axes: ``{latent: axis names}`` (a model's ``latent_axes``, a NumPyro model's
        ``{site: info.axes}``); other latents get ArviZ's default dims.
      observed: ``{name: array}`` of observations for the ``observed_data`` group.
      deterministic: the :class:`~grepvi.interop.numpyro_model.NumPyroModel` the result was
        fitted from: its ``numpyro.deterministic`` sites join the ``posterior`` group, computed
        at the same draws (:meth:`NumPyroModel.deterministic`), and its ``moving`` latent sites
        (a support bounded by other latents) are reported by their values, not by the
        unconstrained coordinate ``q`` is fitted on.
    """
    az = _arviz()
    posterior = {
        name: np.asarray(draws)[None] for name, draws in posterior_draws(result, num_draws, seed).items()
    }
    if deterministic is not None:  # the model's deterministic sites at the same draws
        values = deterministic.deterministic(result, num_draws, seed)
        moving = set(getattr(deterministic, "moving", ()))
        posterior.update(
            {name: value[None] for name, value in values.items() if name not in posterior or name in moving}
        )
    dims = {}
    for name, axes in dict(latent_axes or {}).items():
        if name in posterior and len(axes) == posterior[name].ndim - 2:
            dims[name] = [axis.replace(":", "_") for axis in axes]
    sample_stats = {
        "elbo": np.asarray(result.trace.elbo, np.float64)[None],
        "wall_time": np.asarray(result.trace.wall_time, np.float64)[None],
    }
    attrs = {"inference_library": "grepvi", "estimator": result.estimator}
    if result.convergence is not None:
        attrs.update(
            converged=int(result.convergence.converged),
            reason=str(result.convergence.reason),
            num_iterations=int(result.convergence.num_iterations),
        )
    return az.from_dict(
        posterior=posterior,
        sample_stats=sample_stats,
        observed_data=None if observed is None else {k: np.asarray(v) for k, v in observed.items()},
        dims=dims,
        attrs=attrs,
    )


def psis_pareto_k(log_ratios) -> float:
    """PSIS Pareto ``k`` of importance log-ratios ``log p(x, z_s) - log q(z_s)``, by ArviZ."""
    az = _arviz()
    _, k = az.psislw(np.asarray(log_ratios, np.float64))
    return float(k)

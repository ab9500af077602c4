"""A fit result in a few lines: ``repr(result)`` and ``result.summary()``.

``repr`` says how the run ended (converged or which cap, iterations, wall time, the ELBO over
the trace's last tenth) and each latent's family and shape. A :class:`~grepvi.FitResult` also
holds the run's whole state (the optimizer's moments, the controller's averages): the
NamedTuple's own repr printed all of it, about 9,000 characters for a four-parameter
regression.

``summary`` is NumPyro's ``print_summary`` for a variational answer: for each latent element,
``q``'s mean and standard deviation (the family's own: closed form, or its Monte Carlo
estimate where it has none) and its quantiles (exact where its marginals are standard
distributions, else of ``num_draws`` draws of ``q``), under the run's
:meth:`~grepvi.inference.controller.Convergence.summary`. No effective sample size or
R-hat: the draws are independent draws of ``q``, not a chain. The values are those of the
latents as fitted: a NumPyro latent whose support moves with other latents is fitted as a
standardized variable (its values: ``NumPyroModel.deterministic``).
"""

import functools
import math

import jax
import numpy as np
from scipy import special, stats

from grepvi import validation
from grepvi.errors import ConfigError
from grepvi.families import Beta, Dirichlet, Gamma, LogitNormal, LogNormal, Normal
from grepvi.families.transformed import Affine
from grepvi.inference.compilation_cache import once_compiler_options

__all__ = ["describe", "posterior_table", "final_elbo", "tail_mean"]

QUANTILES = (0.05, 0.5, 0.95)


def final_elbo(trace, fraction: float = 0.1) -> float:
    """The mean of the finite ELBO estimates over the last ``fraction`` of ``trace``'s evaluated
    iterations (the paper's Table 1 criterion: :func:`tail_mean`); NaN where there are none."""
    return tail_mean(getattr(trace, "elbo", ()), fraction, empty=math.nan)


def tail_mean(elbo, fraction: float = 0.1, empty: float = -math.inf) -> float:
    """The mean of the last ``fraction`` of an ELBO trace: NaN entries (iterations where the
    ELBO was not evaluated) dropped first, infinite values inside the tail ignored; ``empty``
    for an empty or entirely non-finite trace. The paper's Table 1 criterion, and the eta
    search's (:func:`grepvi.diagnostics.evaluation.best_final_elbo`)."""
    elbo = np.asarray(elbo, np.float64).ravel()
    elbo = elbo[~np.isnan(elbo)]
    tail = elbo[-max(1, math.ceil(fraction * elbo.size)) :] if elbo.size else elbo
    tail = tail[np.isfinite(tail)]
    return float(np.mean(tail)) if tail.size else empty


def _family_label(family) -> str:
    shape = tuple(getattr(family, "shape", ()))
    return f"{type(family).__name__}{list(shape)}" if shape else type(family).__name__


def describe(result) -> str:
    """``result`` in one line: ``FitResult(estimator=..., converged=..., reason=...,
    num_iterations=..., wall_time=..., elbo=..., latents={name: family[shape]})``."""
    convergence = result.convergence
    iterations = (
        int(convergence.num_iterations) if convergence is not None else int(np.size(result.trace.elbo))
    )
    reason = convergence.reason if convergence is not None else "fixed_schedule"
    wall = np.asarray(getattr(result.trace, "wall_time", ()), np.float64)
    seconds = float(wall[-1]) if wall.size else math.nan
    latents = ", ".join(f"{name!r}: {_family_label(result.families[name])}" for name in result.families)
    return (
        f"FitResult(estimator={result.estimator!r}, converged={result.converged}, reason={reason!r}, "
        f"num_iterations={iterations}, wall_time={seconds:.3g} s, elbo={final_elbo(result.trace):.6g}, "
        f"latents={{{latents}}})"
    )


_STANDARD = (Normal, LogNormal, LogitNormal, Gamma, Beta, Dirichlet)


def _closed_form(family) -> bool:
    """Whether :func:`_marginal_quantiles` knows ``family``'s marginals."""
    return isinstance(family, _STANDARD) or (isinstance(family, Affine) and _closed_form(family.base))


def _marginal_quantiles(family, natural: dict, levels: np.ndarray):
    """Exact quantiles ``(len(levels), *shape)`` of ``q``'s marginals from its constrained
    parameters (``family.natural_params``) where they are a standard distribution (a Gaussian
    and its exp or sigmoid, a gamma, a beta, a Dirichlet's beta marginals, and an ``Affine`` of
    one of these); None for the others (their quantiles come from draws)."""
    at = levels.reshape((-1,) + (1,) * len(family.shape))
    natural = {key: np.asarray(value, np.float64) for key, value in natural.items()}
    if isinstance(family, Affine):
        base = _marginal_quantiles(family.base, natural, levels)
        if base is None:
            return None
        flipped = _marginal_quantiles(family.base, natural, 1.0 - levels)  # a negative scale
        return family.loc + family.scale * np.where(family.scale > 0, base, flipped)
    if isinstance(family, (Normal, LogNormal, LogitNormal)):
        gaussian = natural["loc"] + natural["scale"] * stats.norm.ppf(at)
        if isinstance(family, LogNormal):
            return np.exp(gaussian)
        return special.expit(gaussian) if isinstance(family, LogitNormal) else gaussian
    if isinstance(family, Gamma):
        return stats.gamma.ppf(at, natural["concentration"], scale=1.0 / natural["rate"])
    if isinstance(family, Beta):
        return stats.beta.ppf(at, natural["concentration1"], natural["concentration0"])
    if isinstance(family, Dirichlet):
        alpha = natural["concentration"]
        return stats.beta.ppf(at, alpha, np.sum(alpha, -1, keepdims=True) - alpha)
    return None


def _statistics(posterior: dict, levels: np.ndarray, num_draws: int, seed: int) -> dict:
    """``{name: (mean, std, quantiles)}`` of every latent's ``q``: its family's mean and
    standard deviation, and the ``levels``' quantiles, exact where the marginals are standard
    distributions, else of ``num_draws`` draws (the keys of
    :func:`grepvi.interop.arviz_io.posterior_draws`). One compiled program (op by op, each
    operation would compile a program of its own), which draws only for the latents without
    exact quantiles (the gamma and Dirichlet samplers' programs took 0.6 and 0.8 s to compile)."""
    names = sorted(posterior)
    families = {name: posterior[name].family for name in names}
    drawn = {name for name in names if not _closed_form(families[name])}

    @functools.partial(jax.jit, compiler_options=once_compiler_options())
    def program(params, key):
        keys = jax.random.split(key, len(names))
        out = {}
        for key_i, name in zip(keys, names, strict=True):
            family = families[name]
            draws = family.sample(params[name], key_i, (num_draws,)) if name in drawn else None
            out[name] = (
                family.mean(params[name]),
                jax.numpy.sqrt(family.variance(params[name])),
                family.natural_params(params[name]),
                draws,
            )
        return out

    params = {name: posterior[name].params for name in names}
    values = jax.tree_util.tree_map(np.asarray, program(params, jax.random.key(seed)))
    out = {}
    for name in names:
        mean, sd, natural, draws = values[name]
        quantiles = None if name in drawn else _marginal_quantiles(families[name], natural, levels)
        if quantiles is None:
            quantiles = np.quantile(draws, levels, axis=0)
        shape = np.broadcast_shapes(np.shape(mean), np.shape(quantiles)[1:])
        out[name] = (np.broadcast_to(mean, shape), np.broadcast_to(sd, shape), quantiles)
    return out


def _element_names(name: str, shape: tuple) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{','.join(str(i) for i in index)}]" for index in np.ndindex(*shape)]


def posterior_table(
    result, num_draws: int = 1000, seed: int = 0, max_rows: int = 60, quantiles=QUANTILES
) -> str:
    """A table of ``q``'s mean, standard deviation and ``quantiles`` for every latent element
    (at most ``max_rows`` rows; the rest counted by latent), under the run's convergence line."""
    num_draws = validation.positive_int(num_draws, "num_draws")
    max_rows = validation.positive_int(max_rows, "max_rows")
    quantiles = tuple(float(q) for q in quantiles)
    if not all(0.0 <= q <= 1.0 for q in quantiles):
        raise ConfigError(f"quantiles: expected values in [0, 1], found {quantiles}")
    levels = np.asarray(quantiles, np.float64)
    stats = _statistics(result.posterior, levels, num_draws, seed)
    header = ["", "mean", "sd"] + [f"{100 * q:g}%" for q in quantiles]
    rows, omitted = [], {}
    for name in result.posterior:  # the model's order
        mean, sd, levels_at = stats[name]
        flat = levels_at.reshape(len(quantiles), -1)
        for i, label in enumerate(_element_names(name, mean.shape)):
            if len(rows) >= max_rows:
                omitted[name] = omitted.get(name, 0) + 1
                continue
            values = [mean.reshape(-1)[i], sd.reshape(-1)[i], *flat[:, i]]
            rows.append([label] + [f"{float(v):.4g}" for v in values])
    widths = [max(len(row[j]) for row in [header, *rows]) for j in range(len(header))]
    lines = []
    if result.convergence is not None:
        lines.append(result.convergence.summary())
    lines.append("q's mean, standard deviation and quantiles (of draws where not in closed form):")
    for row in [header, *rows]:
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    for name, count in omitted.items():
        lines.append(f"... {count} more element(s) of {name!r}: result.posterior[{name!r}]")
    return "\n".join(lines)

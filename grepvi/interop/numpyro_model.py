"""G-REP for NumPyro models: a model's sample sites become grepvi factors over plate axes.

NumPyro is an optional extra (``pip install 'grepvi[numpyro]'``). Given a NumPyro model and its
arguments (the data), :func:`from_numpyro` traces the model once and builds:

* one variational family per latent sample site, chosen from the site's support
  (:func:`family_for_support`): positive -> :class:`~grepvi.Gamma`, ``greater_than(c)`` ->
  ``c + Gamma``, unit interval -> :class:`~grepvi.Beta`, ``interval(a, b)`` -> ``a + (b - a)
  Beta`` (:class:`~grepvi.families.transformed.Affine`), simplex -> :class:`~grepvi.Dirichlet`,
  real -> :class:`~grepvi.Normal`, any other support with a NumPyro bijection ->
  :class:`~grepvi.families.transformed.TransformedNormal`; ``families=`` overrides any site (a
  family whose support lies inside the site's, or a name of :data:`FAMILY_NAMES`, placed on the
  site's support), checked: a family outside the site's support is refused;
* one :class:`~grepvi.models.Factor` per sample site (latent or observed): the site's
  ``log_prob`` (masked and scaled as NumPyro does), over the site's batch axes named by its
  **plates** (``numpyro.plate("n", N)`` names the axis ``"n"``; a batch axis outside any plate
  gets a name of its own). :func:`grepvi.models.log_joint` then reads the Markov blankets off
  the plates by the same rule as the named-axis models: a site's local log joint is every site
  that reads it, summed over the plate axes it lacks. G-REP's correction term and BBVI use
  them (without them, the whole log joint: 5-7x the per-draw variance on the DEF and MF).

The factors take the latents in log space (``log z``, ``logit z``; ``NumPyroModel.target``):
the model's code sees ``z`` clamped to float's normal range, and a latent site's own density
comes from the exact log-space draw where its distribution has a closed form there.

The model's array arguments are the data (an argument of every compiled program, as for
grepvi's own models); its other arguments (sizes, flags) are fixed when it is built.

A discrete latent site (``z ~ Categorical(w)``, ``Bernoulli``, any support NumPyro can
enumerate) is summed out by enumeration, as NumPyro's NUTS does
(:mod:`grepvi.interop.enumeration`): the continuous latents are fitted against
``log sum_z p(x, z, theta)``, and :meth:`NumPyroModel.deterministic` draws the discrete sites
from ``p(z | x, theta)``.

A plate with ``subsample_size`` (the model indexing its data with the plate's indices) is
minibatch VI: its indices are data too (``data[-1]``, every row by default), and ``fit()``
substitutes a fresh random batch for them in every compiled step
(:meth:`NumPyroModel.minibatch_problem`, :mod:`grepvi.inference.minibatch`).

Example::

    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist, grepvi
    >>> from grepvi.interop.numpyro_model import from_numpyro
    >>> def model(counts):
    ...     rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
    ...     with numpyro.plate("n", counts.shape[0]):
    ...         numpyro.sample("x", dist.Poisson(rate), obs=counts)
    >>> adapted = from_numpyro(model, jnp.array([3.0, 5.0, 4.0]))
    >>> type(adapted.families["rate"]).__name__, adapted.joint.blankets["rate"]
    ('Gamma', ('rate', 'x'))
    >>> result = adapted.fit(progress=False)
    >>> abs(float(result.posterior["rate"].mean()) - 3.5) < 0.02 * 3.5  # exact: (2 + 12) / (1 + 3)
    True
"""

import contextlib
import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import CentredSiteWarning, ModelError, ParamSiteWarning
from grepvi.families import Beta, Dirichlet, Gamma, GeneralizedDirichlet, LogitNormal, LogNormal, Normal
from grepvi.families.base import Family
from grepvi.families.transformed import Affine, TransformedNormal, is_ordered
from grepvi.inference.compilation_cache import once_compiler_options
from grepvi.inference.paused_collection import paused_collection
from grepvi.interop.enumeration import ENUMERATED_FACTOR, conditional_draws, discrete_sites, marginalized
from grepvi.models.factors import Factor, LogJoint, log_joint
from grepvi.target import Target
from grepvi.threefry import seed_key_data

__all__ = [
    "NumPyroModel",
    "SiteInfo",
    "SubsampledPlate",
    "from_numpyro",
    "family_for_support",
    "family_support",
    "FAMILY_NAMES",
    "numpyro_modules",
    "compact_special_functions",
    "split_arguments",
]

FAMILY_NAMES = {
    "gamma": Gamma,
    "lognormal": LogNormal,
    "beta": Beta,
    "logitnormal": LogitNormal,
    "dirichlet": Dirichlet,
    "generalized-dirichlet": GeneralizedDirichlet,
    "normal": Normal,
    "transformed-normal": TransformedNormal,
}


class SiteInfo(NamedTuple):
    """A sample site as the adapter sees it: its axes (plates), shape, support."""

    name: str
    observed: bool
    axes: tuple[str, ...]  # batch axes (plates or the site's own), then event axes
    shape: tuple[int, ...]
    event_ndim: int
    support: Any
    plates: tuple = ()  # (name, size, dim) of each plate the site is inside (NumPyro's frames)


class SubsampledPlate(NamedTuple):
    """A plate with ``subsample_size``: the model sees ``subsample_size`` of ``size`` rows.

    ``data_axes``: for each of the model's data arrays (``NumPyroModel.data``, in order), the
    axes whose length is ``size`` (where the plate's rows live; a user indexes them with the
    plate's indices)."""

    name: str
    size: int
    subsample_size: int
    dim: int
    data_axes: tuple


class NumPyroModel(NamedTuple):
    """A NumPyro model adapted to grepvi (see :func:`from_numpyro`).

    Attributes:
      joint: the :class:`~grepvi.models.LogJoint` of its sites (blankets, axes).
      data: the model's array arguments (a pytree; an argument of every compiled program).
      families: the variational family of every latent site.
      sites: :class:`SiteInfo` of every sample site.
      logdensity_fn, local_logdensity_fn: functions of ``(latents, data)``, the latents as
        values ``z``; ``joint``'s functions take them in log space (``log z`` for positive and
        simplex sites, ``logit z`` for unit-interval ones, ``z`` otherwise), as ``target()``
        and ``fit()`` hand them.
      subsampled: the plates with ``subsample_size`` (:class:`SubsampledPlate`), by name.
        Their indices are data: ``data`` ends with ``{plate: indices}`` (``arange(size)``,
        every row: ``joint``'s functions are the full-data log joint); given ``B`` indices the
        model sees those rows, scaled by ``size / B`` as NumPyro does
        (:meth:`with_plate_indices`). ``fit()`` runs minibatch VI where a full-data step is
        large (:meth:`default_batch_size`; ``batch_size=B`` always): each step draws a fresh
        batch of ``subsample_size`` rows (:meth:`minibatch_problem`); where it is small, every
        row.
      moving: the latent sites whose support moves with other latents (``Uniform(lo, lo +
        width)``, ``TruncatedNormal(low=lo)``): each is fitted on its unconstrained coordinate
        ``u`` (a :class:`~grepvi.Normal`; ``families[name]`` and ``result.posterior[name]``
        are ``u``'s), the model's value ``biject_to(support)(u)`` on the support of the draw's
        other latents, as NumPyro's NUTS unconstrains it (:func:`moving_log_prob`);
        :meth:`deterministic` gives the values.
    """

    joint: LogJoint
    data: Any
    families: dict[str, Family]
    sites: dict[str, SiteInfo]
    logdensity_fn: Callable
    local_logdensity_fn: Callable
    subsampled: dict = {}
    # (latents, data) -> the model's numpyro.deterministic sites at those values (None: none)
    deterministic_fn: Callable | None = None
    # {site: the other latents its own density reads}: its location-scale latents written
    # centred (centred_sites), named by fit's CentredSiteWarning where a fit drifts in them
    centred: dict = {}
    whitened: tuple = ()  # the centred sites that are multivariate normal (whitened by hand)
    moving: tuple = ()  # latent sites whose support moves with other latents (fitted as u)
    # discrete latent sites summed out by enumeration (grepvi.interop.enumeration), not fitted
    enumerated: tuple = ()
    # (latents, data, rng_key) -> a draw of the enumerated sites from p(z | x, latents) and the
    # model's numpyro.deterministic sites at it (enumeration.conditional_draws; None: none)
    conditional_fn: Callable | None = None

    def deterministic(self, result, num_draws: int = 1000, seed: int = 0) -> dict:
        """Draws of the model's ``numpyro.deterministic`` sites under the fitted ``q``: the model
        run at ``num_draws`` draws of every latent (the draws of
        :func:`grepvi.interop.arviz_io.to_inference_data` with the same ``seed``; NumPyro's
        ``Predictive`` with posterior samples). The values of the ``moving`` latent sites
        too (``biject_to(support)(u)`` at each draw; :func:`to_inference_data` with
        ``deterministic=`` reports them in place of ``u``). The ``enumerated`` discrete sites
        too: at each draw of ``q``, a draw from their conditional ``p(z | x, latents)``
        (:func:`grepvi.interop.enumeration.conditional_draws`, NumPyro's ``infer_discrete``),
        and the deterministic sites at it. ``{}`` where the model has none of these."""
        from grepvi.interop.arviz_io import posterior_draws

        if self.deterministic_fn is None and self.conditional_fn is None:
            return {}
        if self.subsampled:
            raise ModelError("deterministic: not for a model with a subsampled plate (its sites see a batch)")
        draws = posterior_draws(result, num_draws, seed)
        values = {}
        if self.deterministic_fn is not None:
            values.update(jax.jit(jax.vmap(lambda z: self.deterministic_fn(z, self.data)))(draws))
        if self.conditional_fn is not None:  # a key stream of its own beside q's draws
            keys = jax.random.split(jax.random.fold_in(seed_key_data(seed), 1), num_draws)
            values.update(jax.jit(jax.vmap(lambda z, k: self.conditional_fn(z, self.data, k)))(draws, keys))
        return {name: np.asarray(value) for name, value in values.items()}

    @property
    def latent_axes(self) -> dict[str, tuple[str, ...]]:
        """``{latent: axis names}`` (plates, then event axes): for
        :func:`grepvi.interop.arviz_io.to_inference_data`."""
        return self.joint.latent_axes

    @property
    def batch_size(self) -> int | None:
        """The ``subsample_size`` of the model's subsampled plate (``None``: none)."""
        if not self.subsampled:
            return None
        sizes = {plate.subsample_size for plate in self.subsampled.values()}
        return sizes.pop() if len(sizes) == 1 else None

    def latents(self) -> dict[str, Family]:
        return dict(self.families)

    def check_spaces(self, families: dict) -> None:
        """ModelError where a family would hand its site in another space than the adapter's
        family (the log-space factors read ``log z`` of a positive or simplex site, ``logit z``
        of a unit-interval one, the unconstrained ``u`` of an ordered one, ``z`` otherwise)."""
        for name, family in families.items():
            if name in self.families and _family_space(family) != _family_space(self.families[name]):
                raise ModelError(
                    f"latents[{name!r}]: {type(family).__name__} (support {family.support!r}) reads the site "
                    f"in another space than {type(self.families[name]).__name__}; give it with "
                    "from_numpyro(..., families=...) instead"
                )

    def target(self, families: dict | None = None, use_local: bool = True) -> Target:
        """The log-space :class:`~grepvi.Target` (``joint``'s functions; ``log_space=True``)."""
        families = self.latents() if families is None else dict(families)
        self.check_spaces(families)
        return self.joint.target(families, use_local)

    def with_plate_indices(self, data, rng_key=None):
        """The model's ``data`` for its arguments' arrays ``data`` (as :func:`split_arguments`
        gives them): with every row of each subsampled plate (``rng_key`` ``None``), or a random
        batch of ``subsample_size`` rows of each (without replacement). ``data`` itself where
        the model has no subsampled plate."""
        from grepvi.inference.minibatch import draw_rows

        if not self.subsampled:
            return tuple(data)
        plates = sorted(self.subsampled.values())
        keys = [None] * len(plates) if rng_key is None else jax.random.split(rng_key, len(plates))
        indices = {
            plate.name: jnp.arange(plate.size)
            if key is None
            else draw_rows(key, plate.size, plate.subsample_size)
            for plate, key in zip(plates, keys, strict=True)
        }
        return tuple(data) + (indices,)

    def minibatch_problem(self, batch_size: int, families: dict | None = None):
        """The :class:`~grepvi.inference.minibatch.MinibatchProblem` of the subsampled plate:
        each step substitutes ``batch_size`` random rows (drawn inside the compiled step from the
        run's key) for the plate's indices; its sites' log densities are scaled by ``size /
        batch_size`` (once: NumPyro's own scale is undone, the minibatch target applies its
        own), and local latents inside the plate (the plate their first axis) are updated on
        the batch's rows only (:mod:`grepvi.inference.minibatch`).

        Raises:
          ConfigError: no subsampled plate, or ``batch_size`` not in ``1..size``.
          ModelError: more than one subsampled plate, or a latent site inside the plate whose
            first axis is not the plate's (naming the site and the plate).
        """
        from grepvi.errors import ConfigError
        from grepvi.inference.minibatch import MinibatchProblem

        if not self.subsampled:
            raise ConfigError(
                "batch_size: minibatch VI of a NumPyro model needs a plate with subsample_size "
                "(numpyro.plate(name, N, subsample_size=B), its data indexed with the plate's indices)"
            )
        if len(self.subsampled) > 1:
            raise ModelError(
                f"plates {sorted(self.subsampled)}: minibatch VI subsamples one plate; give "
                "subsample_size to one of them"
            )
        (plate,) = self.subsampled.values()
        size = plate.size
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or not 1 <= batch_size <= size:
            raise ConfigError(
                f"batch_size must be an integer in 1..{size} (the size of plate {plate.name!r}), "
                f"got {batch_size!r}"
            )
        batch_size = int(batch_size)
        families = dict(self.latents() if families is None else families)
        joint = self.joint
        local = tuple(sorted(n for n in families if plate.name in joint.latent_axes[n]))
        for name in local:
            if joint.latent_axes[name][0] != plate.name:
                raise ModelError(
                    f"latent site {name!r}: inside the subsampled plate {plate.name!r}, which must be its "
                    f"first axis for minibatch VI (its axes {joint.latent_axes[name]}); give that plate "
                    "the leftmost dim (an outer plate, or dim=-k)"
                )
        scaled = {name for name, info in self.sites.items() if plate.name in [p[0] for p in info.plates]}

        def factor_values_fn(latents, data):
            values = joint.factor_values_fn(latents, data)
            # NumPyro scaled the plate's sites by size / rows; the minibatch target scales them.
            unscale = jnp.shape(data[-1][plate.name])[0] / size
            return {name: value * unscale if name in scaled else value for name, value in values.items()}

        def gather_fn(data, indices):
            return tuple(data[:-1]) + ({**data[-1], plate.name: indices},)

        return MinibatchProblem(
            factor_values_fn=factor_values_fn,
            families=families,
            local_latent_names=local,
            global_latent_names=tuple(sorted(n for n in families if n not in local)),
            factor_axes={factor.name: tuple(factor.axes) for factor in joint.factors},
            dependencies=dict(joint.dependencies),
            local_axes=dict(joint.local_axes),
            data_axes={},
            num_observations=size,
            batch_size=batch_size,
            data=self.data,
            log_space=True,
            axis=plate.name,
            gather_fn=gather_fn,
        )

    def fit(self, estimator="grep", **options):
        """``grepvi.fit`` of this model (its data, local log joints and families), in log space.

        ``batch_size``: with a subsampled plate, by default (or ``"auto"``)
        :meth:`default_batch_size` (every row where a full-data step is small, else the plate's
        ``subsample_size``: minibatch VI); an integer runs minibatch VI with that many rows a
        step, ``None`` fits every row."""
        from grepvi.inference.batch_size import AUTO
        from grepvi.inference.fitting import fit

        families = options.pop("latents", None) or self.latents()
        self.check_spaces(families)
        batch_size = options.pop("batch_size", AUTO)
        if isinstance(batch_size, str) and batch_size.lower() == AUTO:
            # data-parallel runs split every row over the devices (batch_size.resolve_batch_size)
            batch_size = None
            if not options.get("parallel"):
                batch_size = self.default_batch_size(families, estimator, options.get("estimator_options"))
        if batch_size is not None:
            result = fit(self, families, estimator, batch_size=batch_size, **options)
        else:
            result = self._fit_every_row(families, estimator, options)
        hint = centred_site_hint(self.centred, result.convergence, self.whitened)
        if hint:
            warnings.warn(hint, CentredSiteWarning, stacklevel=2)
        return result

    def default_batch_size(self, families: dict | None = None, estimator="grep", estimator_options=None):
        """The rows of a step of :meth:`fit` by default: ``None`` (every row) without a
        subsampled plate, and with one whose rows are few (a quarter under
        ``batch_size.MIN_BATCH_ROWS``) or whose full-data gradient estimate stays within
        ``batch_size.MAX_FULL_BATCH_FLOPS`` (the platform's: ``ACCELERATOR_FACTOR`` times more
        off the CPU), as ``batch_size="auto"`` decides for grepvi's own models; else the plate's
        ``subsample_size``. Several subsampled plates: every row where each has few rows, else
        the smallest ``subsample_size`` (which ``fit`` refuses by name: minibatch VI subsamples
        one plate).

        A plate's ``subsample_size`` asks for minibatches, which cost where every row is cheap:
        400 rows with ``subsample_size=40``, the default procedure took 4.7-31.8 s (22,150 to
        87,850 steps: each step's batch noise makes the stages raise their batches) against
        1.0-1.4 s for every row (2,850-2,875 steps), to the same answer (a logistic regression's
        weights 0.9973 / -1.6775 / 0.4188 against 0.9967 / -1.6784 / 0.4186; fifty-eighth
        session, ``tests/test_numpyro_subsample.py``)."""
        from grepvi.estimators.base import get_estimator
        from grepvi.inference import batch_size as sizes

        plates = list(self.subsampled.values())
        if all(plate.size // 4 < sizes.MIN_BATCH_ROWS for plate in plates):
            return None  # also without a subsampled plate
        if len(plates) > 1:
            return min(plate.subsample_size for plate in plates)
        (plate,) = plates
        families = self.latents() if families is None else families
        estimator = get_estimator(estimator, **dict(estimator_options or {}))
        factor = 1.0 if jax.default_backend() == "cpu" else sizes.ACCELERATOR_FACTOR
        full = sizes.estimate_flops(self, families, estimator, plate.size)
        return None if full <= sizes.MAX_FULL_BATCH_FLOPS * factor else plate.subsample_size

    def _fit_every_row(self, families, estimator, options):
        from grepvi.inference.fitting import fit

        logdensity_fn, local_fn, data = self.joint.logdensity_fn, self.joint.local_logdensity_fn, self.data
        if not jax.tree_util.tree_leaves(data):  # no array argument (a prior-only model): nothing to bind
            logdensity_fn = functools.partial(_with_data, logdensity_fn, data)
            local_fn = None if local_fn is None else functools.partial(_with_data, local_fn, data)
            data = None
        return fit(
            logdensity_fn,
            families,
            estimator,
            data=data,
            local_logdensity_fn=local_fn,
            log_space=True,
            **options,
        )


LOCATION_SCALE_DISTRIBUTIONS = ("Normal", "StudentT", "Cauchy", "Laplace")  # LocScaleReparam's
WHITENED_DISTRIBUTIONS = ("MultivariateNormal",)  # written non-centred by hand: loc + L z


def _base_type(site) -> str:
    """The class name of a site's distribution under its ``expand`` and ``to_event``."""
    return type(_unwrapped(site["fn"])[0]).__name__


def centred_sites(first: dict, dependencies: dict) -> dict[str, tuple[str, ...]]:
    """``{site: the other latents its own density reads}`` of the latent sample sites of a
    model trace ``first`` whose distribution (under its ``expand`` and ``to_event``) is one
    of ``LOCATION_SCALE_DISTRIBUTIONS`` or ``WHITENED_DISTRIBUTIONS`` and whose factor
    (``dependencies``: the latents each factor reads) reads other latents: the sites written
    centred, ``b ~ Normal(mu, sigma)`` with ``mu`` or ``sigma`` latent (``LocScaleReparam(0)``
    writes it non-centred), ``f ~ MultivariateNormal(m, K)`` with ``m`` or ``K`` latent
    (whitened by hand: ``f = m + cholesky(K) z``, ``z`` standard normal)."""
    centred = {}
    for name, site in first.items():
        if site.get("is_observed", True):
            continue
        if _base_type(site) not in LOCATION_SCALE_DISTRIBUTIONS + WHITENED_DISTRIBUTIONS:
            continue
        parents = tuple(other for other in dependencies.get(name, ()) if other != name)
        if parents:
            centred[name] = parents
    return centred


DRIFT_REASONS = ("drifting", "max_draws")  # the stops a centred site's slide ends in


def centred_site_hint(centred: dict, convergence, whitened: Sequence[str] = ()) -> str:
    """The :class:`~grepvi.errors.CentredSiteWarning` for a fit that stopped ``drifting`` or at
    ``max_draws`` with its error (``convergence.error_latent``) or its stages' last change
    (``change_latent``) in a centred site (:func:`centred_sites`) or in a latent such a site
    reads; ``""`` otherwise (converged, another stop, no such site). ``whitened``: the sites
    among them that are multivariate normal (their recipe is the whitening, not a reparam).

    A centred hierarchy's scale and its children's ``q`` scales shrink together under
    mean-field ``q``, slower and slower: BUGS's Oxford strata (``b ~ Normal(0, sigma)``) and a
    local linear trend (``shock ~ Normal(0, sigma_level)``) ran to ``max_draws`` (33,250
    steps) and ``drifting`` (20,525) with ``sigma``'s and ``sigma_level``'s ``q`` still
    sliding; written non-centred they converged in 4,950 and 7,625 steps (3.7 and 4.6 s), their
    ELBOs 2.0 and 2.4 nats higher. A log-Gaussian Cox process's centred 40-bin
    ``MultivariateNormal`` with a latent kernel converged in 34,550 steps (57-79 s; before the
    repeats' cost cap it stopped at ``max_draws``), whitened by hand in 3,050 (7.0 s) with an
    ELBO 13 nats higher. The non-centred ``q`` is another family, not always the better one: on
    a Bayesian lasso whose coefficients ``beta ~ Normal(0, sqrt(sigma2 tau2))`` are partly well
    identified, the non-centred fit converged in 4.2 s (the centred one in 11-16 s) to an ELBO
    3.9 nats lower (``docs/performance.md``, fifty-eighth session); it is named, not done."""
    if convergence.converged or convergence.reason not in DRIFT_REASONS:
        return ""
    named = {
        part
        for group in (convergence.error_latent or "", convergence.change_latent or "")
        for part in group.split("+")
        if part
    }
    hits = sorted(name for name, parents in centred.items() if name in named or named & set(parents))
    if not hits:
        return ""
    described = "; ".join(f"{name!r} reads {', '.join(map(repr, centred[name]))}" for name in hits)
    remedies = []
    reparam = [name for name in hits if name not in whitened]
    if reparam:
        config = ", ".join(f"{name!r}: LocScaleReparam(0)" for name in reparam)
        remedies.append(
            f"fit numpyro.handlers.reparam(model, config={{{config}}}) (LocScaleReparam from "
            "numpyro.infer.reparam)"
        )
    for name in hits:
        if name in whitened:
            remedies.append(
                f"whiten {name!r}: z = numpyro.sample({name + '_white'!r}, "
                "dist.Normal(jnp.zeros(cov.shape[-1]), 1.0).to_event(1)) and "
                f"{name} = numpyro.deterministic({name!r}, loc + jnp.linalg.cholesky(cov) @ z)"
            )
    return (
        f"the fit stopped ({convergence.reason}) with its error or its stages' drift in centred "
        f"site(s) of the model or the latents they read ({described}): mean-field q of a centred "
        "hierarchy can slide as a scale's q shrinks. Written non-centred it may settle: "
        f"{'; '.join(remedies)}; compare the two fits' ELBOs, the non-centred q is another family"
    )


def _with_data(function, data, latents):
    """``function(latents, data)`` for a model whose data has no arrays (``fit`` refuses an
    empty data pytree: it is a constant of the program, not an argument)."""
    return function(latents, data)


def numpyro_modules():
    """``(numpyro, numpyro.handlers)``, or a clear error naming the optional extra."""
    try:
        import numpyro
        from numpyro import handlers
    except ImportError as error:  # pragma: no cover - the extra is not installed
        raise ImportError(
            "grepvi.interop.numpyro_model needs NumPyro: pip install 'grepvi[numpyro]'"
        ) from error
    return numpyro, handlers


def _is_data(leaf) -> bool:
    return isinstance(leaf, np.ndarray | jax.Array)


def split_arguments(args, kwargs):
    """``(data, rebuild)``: the array leaves of the arguments, and ``data -> (args, kwargs)``."""
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)), is_leaf=lambda x: x is None)
    positions = [i for i, leaf in enumerate(leaves) if _is_data(leaf)]
    data = tuple(jnp.asarray(leaves[i]) for i in positions)

    def rebuild(values):
        merged = list(leaves)
        for i, value in zip(positions, values, strict=True):
            merged[i] = value
        return jax.tree_util.tree_unflatten(treedef, merged)

    return data, rebuild


def _bounds(constraint):
    """``(lower, upper)`` float64 arrays of a scalar interval-like constraint, else ``None``.

    Open and closed ends are not told apart: the families' supports are open intervals, which
    lie inside either."""
    from numpyro.distributions import constraints

    if constraint is constraints.real:
        return np.float64(-np.inf), np.float64(np.inf)
    if isinstance(constraint, constraints.interval):  # unit_interval, open_interval, circular
        lower, upper = constraint.lower_bound, constraint.upper_bound
    elif isinstance(constraint, constraints.greater_than):  # positive, nonnegative, softplus_positive
        lower, upper = constraint.lower_bound, np.inf
    elif isinstance(constraint, constraints.less_than):
        lower, upper = -np.inf, constraint.upper_bound
    else:
        return None
    try:
        return np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    except (TypeError, jax.errors.TracerArrayConversionError):  # bounds that are traced values
        return None


def _describe_bounds(lower, upper) -> str:
    def show(x):
        x = np.unique(np.asarray(x))
        return f"{x[0]:g}" if x.size == 1 else f"[{x.min():g}..{x.max():g}]"

    return f"({show(lower)}, {show(upper)})"


def family_support(family: Family):
    """A family's support as ``(lower, upper)`` arrays, ``"simplex"``, a NumPyro constraint
    (:class:`~grepvi.families.transformed.TransformedNormal`), or ``None`` (unknown)."""
    if isinstance(family, Affine):
        return family.bounds()
    if isinstance(family, TransformedNormal):
        return family.constraint
    return {
        "positive": (np.float64(0.0), np.float64(np.inf)),
        "unit_interval": (np.float64(0.0), np.float64(1.0)),
        "real": (np.float64(-np.inf), np.float64(np.inf)),
    }.get(family.support, family.support if family.support == "simplex" else None)


def _support_text(support) -> str:
    if isinstance(support, tuple):
        return _describe_bounds(*support)
    return str(support)


def _check_inside(site, family, support, shape, hint=True) -> Family:
    """``family`` if its support lies inside the site's ``support``, else ModelError."""
    from numpyro.distributions import constraints

    ours = family_support(family)
    if ours is None:  # a user's family with a support grepvi does not know: the user's call
        return family
    base = support
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    theirs = _bounds(base)
    if isinstance(ours, tuple) and theirs is not None:
        lower, upper = (np.broadcast_to(x, shape) for x in theirs)
        inside = np.all(lower <= np.broadcast_to(ours[0], shape)) and np.all(
            np.broadcast_to(ours[1], shape) <= upper
        )
    elif ours == "simplex":
        inside = base is constraints.simplex
    elif isinstance(ours, constraints.Constraint):
        inside = type(ours) is type(base) or ours is support
    else:
        inside = False
    if not inside:
        raise ModelError(
            f"site {site!r}: the family {type(family).__name__} has support {_support_text(ours)}, "
            f"which is not inside the site's support {_support_text(theirs) if theirs else support} "
            f"({support!r})" + (f"; {_hint(site, support, shape)}" if hint else "")
        )
    return family


def _hint(site, support, shape) -> str:
    fitting = []
    for name in sorted(FAMILY_NAMES):
        try:
            family_for_support(site, support, shape, 0, name, hint=False)
        except ModelError:
            continue
        fitting.append(name)
    if not fitting:
        return "give a grepvi family on the site's support"
    return f"family names that fit it (placed on the site's support): {fitting}"


def _on_bounds(kind, lower, upper, shape):
    """A family of ``kind`` (``"positive"``: a gamma-like base, ``"unit"``: a beta-like one)
    placed on ``(lower, upper)`` by an affine map; ``None`` where it does not fit."""
    lower, upper = np.broadcast_to(lower, shape), np.broadcast_to(upper, shape)
    lo_finite, hi_finite = np.isfinite(lower), np.isfinite(upper)
    if kind == "positive":
        if np.all(lo_finite) and not np.any(hi_finite):
            return (0.0, 1.0) if np.all(lower == 0) else (lower, 1.0)
        if np.all(hi_finite) and not np.any(lo_finite):
            return (upper, -1.0)
        return None
    if kind == "unit" and np.all(lo_finite & hi_finite):
        if np.all(lower == 0) and np.all(upper == 1):
            return (0.0, 1.0)
        return (lower, upper - lower)
    return None


_KINDS = {"gamma": "positive", "lognormal": "positive", "beta": "unit", "logitnormal": "unit"}


def _placed(base_family, where):
    loc, scale = where
    if np.all(np.asarray(loc) == 0) and np.all(np.asarray(scale) == 1):
        return base_family
    return Affine(base=base_family, loc=loc, scale=scale)


# The shape of a positive site's gamma at the start (its mean is 1, or its prior's centre):
# a coefficient of variation of 1 / sqrt(10) = 0.32, not the family's own default of 1 (an
# exponential), whose draws of a logistic growth curve's rate reached r > 2, where the
# recursion is chaotic: the fit climbed into a mode 76 nats below NUTS's and never
# converged, where from 10 it converged to NUTS's means (NumPyro's AutoNormal starts at
# a scale of 0.1 in the log).
START_CONCENTRATION = 10.0


def _started_gamma(shape) -> Gamma:
    return Gamma(shape=shape, init_concentration=START_CONCENTRATION)


def family_for_support(site: str, support, shape, event_ndim: int, choice=None, hint: bool = True) -> Family:
    """The family of a latent site: ``choice`` (a family or a name), else by its support.

    By support: ``positive`` -> Gamma; ``greater_than(c)``/``greater_than_eq(c)`` -> ``c +
    Gamma``; ``less_than(c)`` -> ``c - Gamma``; ``unit_interval`` -> Beta; ``interval(a, b)``
    -> ``a + (b - a) Beta``; ``simplex`` -> Dirichlet (by name ``"generalized-dirichlet"``:
    :class:`~grepvi.GeneralizedDirichlet`, beta sticks, every Dirichlet a member: on fourteen
    benchmark models with a simplex latent its ELBO was the Dirichlet's or higher, 3.8 nats on
    a concentrated posterior of unequal spreads, but its fits took 1.1-1.7 times as long, 3.2
    on a topic model, and GARCH's weights did not converge in 9,100 iterations: not the
    default); ``real``/``real_vector`` -> Normal;
    any other support with a NumPyro bijection (ordered and positive ordered vectors,
    Cholesky factors, ...) -> :class:`~grepvi.families.transformed.TransformedNormal`.

    A name (``"gamma"``, ``"lognormal"``, ``"beta"``, ``"logitnormal"``, ``"dirichlet"``,
    ``"generalized-dirichlet"``, ``"normal"``, ``"transformed-normal"``) is placed on the
    site's support (``"beta"`` on ``Uniform(0, 10)`` is ``10 Beta``); a family instance must
    have its support inside the site's. Either is refused (ModelError, naming the site, its
    support and the family's) where it does not fit.
    """
    from numpyro.distributions import constraints

    shape = tuple(shape)
    if isinstance(choice, Family):
        if tuple(choice.shape) != shape:
            raise ModelError(f"site {site!r}: the family's shape {choice.shape} is not the site's {shape}")
        return _check_inside(site, choice, support, shape, hint)
    base = support
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    bounds = _bounds(base)
    if choice is not None:
        if choice not in FAMILY_NAMES:
            raise ModelError(
                f"site {site!r}: unknown family {choice!r}; expected a grepvi family or one of "
                f"{sorted(FAMILY_NAMES)}"
            )
        if choice == "transformed-normal":
            return _transformed_normal(site, support, shape)
        try:
            family = FAMILY_NAMES[choice](shape=shape)
        except (ValueError, TypeError) as error:
            raise ModelError(
                f"site {site!r}: the family {choice!r} does not fit the site (shape {shape}, support "
                f"{support!r}): {error}"
            ) from error
        if choice in _KINDS and bounds is not None:
            where = _on_bounds(_KINDS[choice], *bounds, shape)
            if where is not None:
                return _placed(family, where)
        return _check_inside(site, family, support, shape, hint)
    if bounds is not None:
        lower, upper = bounds
        if not np.any(np.isfinite(lower)) and not np.any(np.isfinite(upper)):
            return Normal(shape=shape)
        for kind, family in (("positive", _started_gamma(shape)), ("unit", Beta(shape=shape))):
            where = _on_bounds(kind, lower, upper, shape)
            if where is not None:
                return _placed(family, where)
    if base is constraints.simplex:
        return Dirichlet(shape=shape)
    if base is constraints.real:
        return Normal(shape=shape)
    return _transformed_normal(site, support, shape)


def _transformed_normal(site, support, shape):
    try:
        return TransformedNormal(shape=shape, constraint=support)
    except (NotImplementedError, ValueError, TypeError) as error:
        raise ModelError(
            f"site {site!r}: no variational family for the support {support!r} ({error}); give one "
            f"with families={{{site!r}: grepvi.<Family>(shape={shape})}}"
        ) from error


def _space(support) -> str:
    """How a family's latent reaches a log-space target: ``"log"``, ``"logit"`` or ``"value"``."""
    return {"positive": "log", "simplex": "log", "unit_interval": "logit"}.get(support, "value")


def _family_space(family) -> str:
    """How ``family``'s latent reaches the log-space factors: ``"unconstrained"`` (its ``u``)
    for an ordered :class:`TransformedNormal` (:meth:`TransformedNormal.to_log_space`), else
    by its support (:func:`_space`)."""
    if isinstance(family, TransformedNormal) and family.ordered:
        return "unconstrained"
    return _space(family.support)


def _transform_parts(transform) -> list:
    """``transform``'s parts in the order applied (a ``ComposeTransform`` flattened)."""
    from numpyro.distributions import transforms

    if isinstance(transform, transforms.ComposeTransform):
        return [t for part in transform.parts for t in _transform_parts(part)]
    return [transform]


def _transform_types(transform) -> tuple:
    """``transform``'s parts (:func:`_transform_parts`) as types."""
    return tuple(type(t) for t in _transform_parts(transform))


def _unconstrained_log_prob(fn, u, bijection):
    """``log p(z)`` of an ordered latent site's own distribution from the unconstrained draw
    ``u`` (``z = bijection(u)``), exact where ``z`` lost its small gaps to float rounding:
    a ``TransformedDistribution`` whose transforms are the family's ``bijection`` (NumPyro's
    ordered prior, ``TransformedDistribution(Normal(...), OrderedTransform())``) has ``u`` as its
    base value, so its density is the base's at ``u`` less the transforms' log-Jacobians, the
    intermediate values computed forward from ``u`` and never by inverting ``z``. ``None``
    (evaluate ``fn.log_prob`` at ``z``) for any other distribution. Only parameter-free
    transforms (ordered, exp) are matched by type."""
    import numpyro.distributions as dist
    from numpyro.distributions import transforms
    from numpyro.distributions.util import sum_rightmost

    fn, event_sum = _unwrapped(fn)
    if not isinstance(fn, dist.TransformedDistribution):
        return None
    parts = tuple(t for transform in fn.transforms for t in _transform_types(transform))
    free = (transforms.OrderedTransform, transforms.ExpTransform)
    if parts != _transform_types(bijection) or not all(issubclass(t, free) for t in parts):
        return None
    # TransformedDistribution.log_prob's sum, forward from u (its support check would reject a
    # z whose gaps rounded away): the event axes each log-Jacobian is summed over, as it does
    event_dim, summed = len(fn.event_shape), []
    for transform in reversed(fn.transforms):
        summed.append(event_dim - transform.codomain.event_dim)
        event_dim = transform.domain.event_dim + summed[-1]
    value = sum_rightmost(fn.base_dist.log_prob(u), event_dim - len(fn.base_dist.event_shape))
    x = u
    for transform, batch_ndim in zip(fn.transforms, reversed(summed), strict=True):
        y = transform(x)
        value = value - sum_rightmost(transform.log_abs_det_jacobian(x, y), batch_ndim)
        x = y
    return jnp.sum(value, tuple(range(-event_sum, 0))) if event_sum else value


def _unwrapped(fn):
    """``(base, event_sum)``: ``fn`` without its ``ExpandedDistribution`` and ``Independent``
    wrappers, and the event axes the latter summed (a value computed from ``base`` is summed
    over them to be ``fn``'s)."""
    import numpyro.distributions as dist

    event_sum = 0
    while True:
        if isinstance(fn, dist.ExpandedDistribution):
            fn = fn.base_dist
        elif isinstance(fn, dist.Independent):
            event_sum += fn.reinterpreted_batch_ndims
            fn = fn.base_dist
        else:
            return fn, event_sum


def _log_space_log_prob(fn, u, space):
    """``log p(z)`` of a latent site's own distribution from ``u = log z`` (or ``logit z``) in
    closed form, where ``fn`` allows it: exact where ``z = exp(u)`` underflows (a gamma draw of
    shape 0.1 below 1e-38). ``None``: evaluate ``fn.log_prob`` at ``z``."""
    import numpyro.distributions as dist

    from grepvi.numerics import betaln, gammaln

    fn, event_sum = _unwrapped(fn)
    value = None
    if space == "log" and type(fn) is dist.Gamma:
        a, rate = fn.concentration, fn.rate
        value = a * jnp.log(rate) - gammaln(a) + (a - 1.0) * u - rate * jnp.exp(u)
    elif space == "log" and type(fn) is dist.Exponential:
        value = jnp.log(fn.rate) - fn.rate * jnp.exp(u)
    elif space == "log" and type(fn) is dist.LogNormal:
        value = dist.Normal(fn.loc, fn.scale).log_prob(u) - u
    elif space == "log" and type(fn) is dist.InverseGamma:
        a, rate = fn.concentration, fn.rate
        value = a * jnp.log(rate) - gammaln(a) - (a + 1.0) * u - rate * jnp.exp(-u)
    elif space == "logit" and type(fn) is dist.Beta:
        a, b = fn.concentration1, fn.concentration0
        value = (a - 1.0) * jax.nn.log_sigmoid(u) + (b - 1.0) * jax.nn.log_sigmoid(-u) - betaln(a, b)
    elif space == "log" and type(fn) is dist.Dirichlet:
        alpha = fn.concentration
        value = jnp.sum((alpha - 1.0) * u, -1) + gammaln(jnp.sum(alpha, -1)) - jnp.sum(gammaln(alpha), -1)
    if value is None:
        return None
    return jnp.sum(value, tuple(range(-event_sum, 0))) if event_sum else value


@contextlib.contextmanager
def compact_special_functions():
    """NumPyro's distributions compute ``log B(a, b)`` with :func:`grepvi.numerics.betaln`
    inside this block (the one a negative binomial, beta-binomial, Student-t or beta density
    calls): the same function, to float32's rounding, for a fraction of the compiled program.

    ``jax.scipy.special.betaln`` (scipy's accurate algorithm) compiles into hundreds of
    operations an element with its gradient: a negative-binomial GLMM's default step (55
    draws of 400 rows) took 5.4 ms with it and 1.4 ms with grepvi's, whose error is 7e-7
    relative in the value and 3e-5 in the gradient (``tests/test_math.py``). The adapter's log
    density enters it around the model's trace and its sites' densities; the modules'
    ``betaln`` is restored on exit (only where it was JAX's: a nested block changes nothing).
    The swap is the process's while the block runs (tracing, on the calling thread): another
    thread's NumPyro densities traced meanwhile get the same function, differently rounded.
    """
    from jax.scipy.special import betaln as jax_betaln

    from grepvi.numerics import betaln

    modules = [module for module in _betaln_modules() if getattr(module, "betaln", None) is jax_betaln]
    for module in modules:
        module.betaln = betaln
    try:
        yield
    finally:
        for module in modules:
            module.betaln = jax_betaln


@functools.cache
def _betaln_modules():
    import numpyro.distributions.conjugate as conjugate
    import numpyro.distributions.continuous as continuous

    return conjugate, continuous


def _site_log_prob(site, log_prob=None):
    """The site's ``log_prob`` over its batch shape, masked and scaled as NumPyro does
    (``log_prob``: the value computed elsewhere, e.g. from the log-space draw)."""
    value = site["fn"].log_prob(site["value"]) if log_prob is None else log_prob
    if site.get("mask") is not None:
        value = jnp.where(site["mask"], value, 0.0)
    if site.get("scale") is not None:
        value = value * site["scale"]
    return value


def _uniform_or_prior(site):
    """NumPyro's ``init_to_uniform`` value of a site, or None (the prior's draw) where it has
    none (a support without a bijection: the adapter names such a site itself)."""
    from numpyro.infer.initialization import init_to_uniform

    try:
        return init_to_uniform(site)
    except (ValueError, NotImplementedError):
        return None


def _site_support(fn):
    """``fn.support``, but a ``TransformedDistribution`` of a real vector through NumPyro's own
    bijection to positive ordered vectors (``OrderedTransform`` then ``ExpTransform``, which
    is ``biject_to(positive_ordered_vector)``) has that support, not the ``positive`` of its
    last transform: a family on ``positive`` started both rates of a Poisson mixture at one
    value, where the prior (the transforms inverted) takes the log of their gap, 0, and the
    fit stopped before it began (``ModelError``: ``nan at the initial point``)."""
    from numpyro.distributions import TransformedDistribution, constraints, transforms

    if not isinstance(fn, TransformedDistribution):
        return fn.support
    parts = [part for transform in fn.transforms for part in _transform_parts(transform)]
    base = fn.base_dist.support
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    if (
        base is constraints.real
        and len(parts) >= 2
        and isinstance(parts[-2], transforms.OrderedTransform)
        and isinstance(parts[-1], transforms.ExpTransform)
    ):
        return constraints.positive_ordered_vector
    return fn.support


def _latent_support(site):
    """A latent site's elementwise support (under ``independent``), None for any other site."""
    from numpyro.distributions import constraints

    if site.get("type") != "sample" or site.get("is_observed", True):
        return None
    support = _site_support(site["fn"])
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


def _real_valued(site) -> bool:
    """A latent site whose support is the real line (elementwise)."""
    from numpyro.distributions import constraints

    return _latent_support(site) is constraints.real


def _centre_candidates(site) -> tuple:
    """``(shape, [mean, median])`` of a site's distribution, those it has, as float32 arrays of
    the site's shape (staged)."""
    fn = site["fn"]
    shape = tuple(fn.shape(site["kwargs"].get("sample_shape", ())))
    candidates = []
    for centre in (lambda: fn.mean, lambda: fn.icdf(jnp.full(shape, 0.5))):
        try:
            candidates.append(jnp.broadcast_to(jnp.asarray(centre(), jnp.float32), shape))
        except Exception:  # noqa: BLE001 - a distribution without it (NotImplementedError and kin)
            continue
    return shape, candidates


def _prior_center_or_uniform(site):
    """A real-valued latent site's prior centre given the sites before it (its mean, else its
    median where the mean is not finite, as a Cauchy's; 0 where neither is: NumPyro's
    ``init_to_mean`` and ``init_to_median`` run the model the same way), every other site's
    :func:`_uniform_or_prior` value. Staged: the mean and the median are traced arrays, the
    first finite chosen elementwise."""
    if not _real_valued(site):
        return _uniform_or_prior(site)
    shape, candidates = _centre_candidates(site)
    value = jnp.zeros(shape, jnp.float32)
    for candidate in reversed(candidates):
        value = jnp.where(jnp.isfinite(candidate), candidate, value)
    return value


def _imputed_sites(trace) -> set:
    """The latent sites ``sample(name, fn, obs=y, obs_mask=m)`` makes to impute ``y`` where ``m``
    is False: ``name + "_unobserved"``, of the full shape, masked where ``m`` is True, beside the
    observed site ``name + "_observed"`` and the deterministic ``name``."""
    return {
        f"{name}_unobserved"
        for name, site in trace.items()
        if site["type"] == "deterministic"
        and trace.get(f"{name}_unobserved", {}).get("type") == "sample"
        and not trace[f"{name}_unobserved"]["is_observed"]
        and trace.get(f"{name}_observed", {}).get("is_observed", False)
    }


def _sample_sites(trace):
    """The model's sample sites, ``numpyro.factor``'s included: a factor is an observed site
    marked auxiliary (a ``Unit`` distribution whose ``log_prob`` is the factor), and NumPyro's
    own ``log_density`` counts it. Only a latent auxiliary site (a guide's) is left out."""
    return {
        name: site
        for name, site in trace.items()
        if site["type"] == "sample"
        and (site["is_observed"] or not site.get("infer", {}).get("is_auxiliary", False))
    }


@paused_collection()
def from_numpyro(model: Callable, *args, families: dict | None = None, **kwargs) -> NumPyroModel:
    """Adapts a NumPyro ``model(*args, **kwargs)`` to grepvi (module docstring).

    Args:
      model: a NumPyro model function.
      *args, **kwargs: its arguments; the arrays among them are the data.
      families: optional ``{site: family or family name}`` overrides.

    Raises:
      ModelError: a discrete latent site, a support without a family, a model whose sites
        change between traces, or plates that disagree on an axis' size (naming the site).
    """
    numpyro, handlers = numpyro_modules()
    data, rebuild = split_arguments(args, kwargs)
    families = dict(families or {})
    user_trace = _user_trace(model, args, kwargs)
    subsampled, early_sites = _subsampled_plates(user_trace, data)
    enumerated = tuple(discrete_sites(user_trace))
    conditional_fn = None
    if enumerated:  # summed out as NumPyro's NUTS does (grepvi.interop.enumeration)
        _check_enumerated(enumerated, subsampled, families)
        draw = model, user_trace, list(enumerated)
        model = marginalized(*draw)  # first: names what cannot be enumerated, or funsor missing
        conditional_fn = _conditional_fn(conditional_draws(*draw), rebuild)
        _, early_sites = _subsampled_plates(_user_trace(model, args, kwargs), data)
        if early_sites == {ENUMERATED_FACTOR}:
            raise ModelError(
                f"site {enumerated[0]!r}: every latent site is discrete and summed out by enumeration, so "
                "the model has no continuous latent site left to fit (its evidence is the marginal itself)"
            )
    if subsampled:  # the plates' indices become data (all rows here; a batch per minibatch step)
        model, data, rebuild = _indexed_model(model, data, rebuild, subsampled)

    moving = set()  # latent sites whose support moves with other latents (their ``u`` given)

    def trace_model(latents, data, seed=0, substitute_fn=None):
        call_args, call_kwargs = rebuild(data)
        if isinstance(seed, int):  # a raw uint32 key, not int64 where traced under enable_x64
            seed = seed_key_data(seed)
        if latents and moving.intersection(latents):
            # a moving site's value from its u on the support its distribution has in this run
            substituted = handlers.seed(
                handlers.substitute(model, substitute_fn=functools.partial(_substituted, latents, moving)),
                rng_seed=seed,
            )
        elif latents:
            # the values substituted inside the seed handler, which then splits no key for a
            # site that has one (outside it, a Threefry split per latent site in each trace)
            substituted = handlers.seed(handlers.substitute(model, data=latents), rng_seed=seed)
        else:  # shapes only: uniform draws in the unconstrained space, not the prior's
            # (a Dirichlet or gamma prior draw compiles a rejection sampler: 0.6-1.9 s)
            substituted = handlers.substitute(
                handlers.seed(model, rng_seed=seed), substitute_fn=substitute_fn or _uniform_or_prior
            )
        return handlers.trace(substituted).get_trace(*call_args, **call_kwargs)

    with warnings.catch_warnings():  # prior draws of shape-0.1 gammas round to 0: out of support
        warnings.filterwarnings("ignore", "Out-of-support values", UserWarning)
        (first_trace, first_log_probs), (second_trace, _) = concrete_traces(trace_model, data, (0, 1))
    first, second = _sample_sites(first_trace), _sample_sites(second_trace)
    for name in sorted(_imputed_sites(first_trace)):
        # Its elements at the observed positions are read by nothing and NumPyro's mask gives
        # them no density: an improper posterior (q's entropy grows without bound; the fit
        # stalled on non-finite gradients naming no latent). Giving them their own density
        # instead would act, under mean-field q, as pseudo-observations of the other latents.
        observed = name[: -len("_unobserved")]
        raise ModelError(
            f"site {name!r}: sample({observed!r}, ..., obs_mask=...) imputes the masked entries with a "
            "latent of the full shape whose observed entries have no density (an improper posterior; "
            "NumPyro documents obs_mask as not meant for MCMC either). Sample the missing entries as a "
            f"latent site of their own (e.g. {observed}_missing with the distribution of the entries "
            "where the mask is False) and observe the others"
        )
    held = sorted(name for name, site in first_trace.items() if site.get("type") == "param")
    if held:
        warnings.warn(
            f"numpyro.param site(s) {held}: held at their initial values (as NumPyro's MCMC holds "
            "them; NumPyro's SVI would optimize them, a point estimate). grepvi fits sample sites: "
            "give such a quantity a prior with numpyro.sample to fit it, or pass it as data",
            ParamSiteWarning,
            stacklevel=2,
        )
    batch_shapes = {name: tuple(jnp.shape(first_log_probs[name])) for name in first}
    for name in sorted((set(first) ^ set(second)) | (set(first) ^ early_sites)):
        raise ModelError(f"site {name!r} appears in one trace of the model and not in another")
    for name, site in first.items():
        if jnp.shape(site["value"]) != jnp.shape(second[name]["value"]):
            raise ModelError(f"site {name!r} changes its shape between traces of the model")
        if not site["is_observed"] and _support_moves(site["support"], second[name]["support"]):
            moving.add(name)
        elif site["is_observed"]:
            _check_observed(name, site, first_log_probs[name])

    sites, axis_sizes = {}, {}
    for name, site in first.items():
        observed = bool(site["is_observed"])
        if not observed and site["fn"].is_discrete:
            raise ModelError(
                f"site {name!r}: a discrete latent site ({_base_name(site['fn'])}); grepvi fits "
                "continuous latents only (marginalize it, or observe it)"
            )
        batch_shape = batch_shapes[name]
        shape = tuple(jnp.shape(site["value"]))
        event_ndim = len(shape) - len(batch_shape)
        if event_ndim < 0 or shape[: len(batch_shape)] != batch_shape:
            batch_shape, event_ndim = shape[: len(shape) - site["fn"].event_dim], site["fn"].event_dim
        plates = {frame.dim: frame for frame in site["cond_indep_stack"]}
        axes = []
        for i, size in enumerate(batch_shape):
            frame = plates.get(i - len(batch_shape))
            axis = frame.name if frame is not None else f"{name}:{i}"
            if axis in axis_sizes and axis_sizes[axis] != size:
                raise ModelError(
                    f"site {name!r}: axis {axis!r} has size {size} here and {axis_sizes[axis]} elsewhere"
                )
            axis_sizes[axis] = size
            axes.append(axis)
        for j in range(event_ndim):
            if observed and shape[len(batch_shape) + j] == 0:  # numpyro.factor: Unit's empty event
                continue
            axis = f"{name}:event{j}"
            axis_sizes[axis] = shape[len(batch_shape) + j]
            axes.append(axis)
        event_ndim = len(axes) - len(batch_shape)
        frames = tuple((frame.name, int(frame.size), int(frame.dim)) for frame in site["cond_indep_stack"])
        sites[name] = SiteInfo(name, observed, tuple(axes), shape, event_ndim, site["support"], frames)

    _check_indexed(trace_model, data, subsampled, sites)
    latent_sites = {name: info for name, info in sites.items() if not info.observed}
    unknown = sorted(set(families) - set(latent_sites))
    if unknown:
        raise ModelError(f"families: {unknown} are not latent sites of the model ({sorted(latent_sites)})")
    chosen = {
        name: _moving_family(name, info, families.get(name))
        if name in moving
        else family_for_support(name, info.support, info.shape, info.event_ndim, families.get(name))
        for name, info in latent_sites.items()
    }
    started_at_zero = chosen
    chosen = {  # an ordered latent the user left to the support starts at its prior's median
        name: family if name in families or name in moving else _ordered_start(family, first[name])
        for name, family in chosen.items()
    }

    spaces = {name: _family_space(family) for name, family in chosen.items()}
    readers = dict(chosen)  # each latent's way between z and what the factors read (not its start)

    def batch_shape(info, data):  # a subsampled plate's axis has as many rows as its indices
        axes = info.axes[: len(info.axes) - info.event_ndim]
        return tuple(jnp.shape(data[-1][a])[0] if a in subsampled else axis_sizes[a] for a in axes)

    def values_of(latents):
        return {
            key: readers[key].value_from_log_space(u, jnp.float32)
            if spaces.get(key, "value") != "value"
            else u
            for key, u in latents.items()
        }

    def site_value(name, info, site, latents, data):
        own = None
        if name in latents and name in moving:
            own = moving_log_prob(site, latents[name])
        elif name in latents and spaces.get(name) == "unconstrained":
            own = _unconstrained_log_prob(site["fn"], latents[name], readers[name].transform_)
        elif name in latents and spaces.get(name, "value") != "value":
            own = _log_space_log_prob(site["fn"], latents[name], spaces[name])
        return jnp.broadcast_to(_site_log_prob(site, own), batch_shape(info, data))

    # The factors take the latents in log space (``log z``, ``logit z``, else ``z``): the
    # model's code gets ``z`` clamped to float's normal range (finite ``log z``, ``c / z``),
    # and a latent site's own density comes from the exact log-space draw where its
    # distribution has a closed form there (gamma, exponential, log-normal, inverse gamma,
    # beta, Dirichlet).
    def factor(name, info):
        def fn(latents, data):
            with compact_special_functions():
                return site_value(name, info, trace_model(values_of(latents), data)[name], latents, data)

        return Factor(name, info.axes[: len(info.axes) - info.event_ndim], fn)

    def every_factor(latents, data):  # one run of the model for all its sites
        with compact_special_functions():
            trace = trace_model(values_of(latents), data)
            return {name: site_value(name, info, trace[name], latents, data) for name, info in sites.items()}

    joint = log_joint(
        [factor(name, info) for name, info in sites.items()],
        latent_axes={name: info.axes for name, info in latent_sites.items()},
        axis_sizes=axis_sizes,
        # a family whose elements are independent along the site's event axes (a Normal of a
        # to_event(1) site) has one local log joint per element
        event_ndims={
            name: min(info.event_ndim, len(chosen[name].shape) - len(chosen[name].batch_shape))
            for name, info in latent_sites.items()
        },
        data_example=data,
        evaluate_all=every_factor,
    )

    def to_inputs(latents):
        return {
            key: readers[key].to_log_space(z) if spaces.get(key, "value") != "value" else z
            for key, z in latents.items()
        }

    chosen = _better_starts(chosen, started_at_zero, joint, data)
    centred = {  # a real-valued latent the user left to the support starts at its prior's centre
        name: family if name in families or name in moving else _centred_start(family, first[name])
        for name, family in chosen.items()
    }
    chosen = _better_starts(centred, chosen, joint, data)
    medians = {  # a positive latent at its prior's median, where the model is not finite at the start
        name: family if name in families else _positive_start(family, first[name])
        for name, family in chosen.items()
    }
    chosen = _better_starts(medians, chosen, joint, data, only_off_nonfinite=True)
    if enumerated or any(_is_mixture(site["fn"]) for site in first.values()):
        chosen = _searched_ordered_starts(chosen, joint, data, protected=set(families))

    return NumPyroModel(
        joint=joint,
        data=data,
        families=chosen,
        sites=sites,
        logdensity_fn=lambda latents, data: joint.logdensity_fn(to_inputs(latents), data),
        local_logdensity_fn=lambda latents, data: joint.local_logdensity_fn(to_inputs(latents), data),
        subsampled=subsampled,
        deterministic_fn=_deterministic_fn(trace_model, first_trace, sorted(moving)),
        centred=(centred := centred_sites(first, joint.dependencies)),
        whitened=tuple(name for name in centred if _base_type(first[name]) in WHITENED_DISTRIBUTIONS),
        moving=tuple(sorted(moving)),
        enumerated=enumerated,
        conditional_fn=conditional_fn,
    )


def _conditional_fn(draw, rebuild):
    """``(latents, data, rng_key) -> draw(latents, rng_key, *args, **kwargs)``, the model's
    arguments rebuilt from its data."""

    def conditional(latents, data, rng_key):
        call_args, call_kwargs = rebuild(data)
        return draw(latents, rng_key, *call_args, **call_kwargs)

    return conditional


def _deterministic_fn(trace_model, trace, moving=()):
    """``(latents, data) -> {site: value}`` of the model's ``numpyro.deterministic`` sites and
    its ``moving`` latent sites (their values on their supports; None where there are none)."""
    names = [name for name, site in trace.items() if site["type"] == "deterministic"] + list(moving)
    if not names:
        return None

    def values(latents, data):
        run = trace_model(latents, data)
        return {name: run[name]["value"] for name in names}

    return values


def concrete_traces(trace_model: Callable, data, seeds: Sequence[int]) -> list[tuple[dict, dict]]:
    """The model's traces at uniform draws (``trace_model({}, data, seed)`` per seed) with
    concrete values, and each sample site's ``log_prob`` over its batch shape.

    Each sample site gets a ``"support"`` entry: its distribution's support with concrete
    bounds. The model is traced once, under ``jax.jit`` with the seed an argument (one
    compilation for every seed): run eagerly, every primitive of the model compiles on its
    own (51 programs, 1.4 s, for a 10-site hierarchy before a fit starts; 101 for rat
    tumours). The static parts (plates, names, the distributions' types) come from the
    staged run; the values, log densities and the supports' bounds are the compiled
    program's outputs (its ``site["fn"]`` holds traced parameters: read its type, not its
    arrays). A model whose trace cannot be staged (a value-dependent Python branch, a
    support that is not a pytree) is traced eagerly, as before.
    """

    def staged_program(staged):
        def arrays(data, rng_key):
            trace = trace_model({}, data, rng_key)
            sites = _sample_sites(trace)
            supports = {
                name: jax.tree_util.tree_flatten(_site_support(site["fn"])) for name, site in sites.items()
            }
            staged.update(trace=trace, treedefs={name: tree for name, (_, tree) in supports.items()})
            arrays = {
                name: (site["value"], _site_log_prob(site), supports[name][0]) for name, site in sites.items()
            }
            medians = {name: _prior_median(site, rng_key) for name, site in sites.items() if _ordered(site)}
            return arrays, medians, _prior_centres(trace_model, data, rng_key)

        return arrays

    staged = {}
    program = jax.jit(staged_program(staged), compiler_options=once_compiler_options())
    results = []
    for index, seed in enumerate(seeds):
        key = seed_key_data(seed)
        try:
            if index:  # the model traced again (a model whose sites change shows it), not compiled
                again = {}
                jax.eval_shape(staged_program(again), data, key)
                if _structure(again["trace"]) != _structure(staged["trace"]):
                    raise _Restructured
            concrete, medians, centres = program(data, key)
        except Exception:  # noqa: BLE001 - any failure to stage: the eager trace
            results.append(_eager_trace(trace_model, data, seed))
            continue
        trace, log_probs = {}, {}
        for name, site in staged["trace"].items():
            site = dict(site)
            if name in concrete:
                value, log_prob, bounds = concrete[name]
                support = jax.tree_util.tree_unflatten(staged["treedefs"][name], bounds)
                # the mask and scale (traced values) are applied in ``log_probs`` alone
                site.update(value=value, support=support, mask=None, scale=None)
                log_probs[name] = log_prob
            if name in centres:
                site["prior_center"] = np.asarray(centres[name])
            if name in medians:
                site["prior_median"] = medians[name]
            trace[name] = site
        results.append((trace, log_probs))
    return results


def _better_starts(median, zero, joint, data, only_off_nonfinite: bool = False):
    """Of two starts of the latents (families that differ in their start alone, a Gaussian's
    ``init_loc`` or a Gamma's ``init_mean``: ``median``, the ordered latents at their prior's
    median, :func:`_ordered_start`, the real-valued ones at their prior's centre,
    :func:`_centred_start`, or the positive ones at their prior's median,
    :func:`_positive_start`; and ``zero``, the start before), the one where the model's log
    joint at the families' initial means is higher (``median`` on a tie, or where the model
    cannot be evaluated at ``zero``). ``only_off_nonfinite``: ``median`` only where the log
    joint at ``zero`` is not finite.

    Neither start knows the data: the prior's median spread a three-component mixture's
    locations over the data (from 0, 1 apart, its components merged), but put an ordered
    logistic regression's cut points at -3.3, -2.3, 3.2 and 3.8, where it ran 5,475 iterations
    to the answer it reached in 3,375 from 0, 1, 2, 3. The log joint at the start tells them
    apart: it is higher at the spread locations and at the closer cut points."""
    if all(median[name] is zero[name] for name in median):
        return median
    from grepvi.target import inputs_at_means

    ordered = [name for name in median if median[name] is not zero[name]]

    @functools.partial(jax.jit, compiler_options=once_compiler_options())
    def value(starts, data):  # the families differ in their start alone: one program for both
        params = {name: family.init_params() for name, family in median.items()}  # staged, not op by op
        params = {**params, **{name: {**params[name], **starts[name]} for name in ordered}}
        return joint.logdensity_fn(inputs_at_means(params, median, True), data)

    scores = []
    for families in (median, zero):
        # NumPy: eager jnp ops each compile a program (0.35 s of them here)
        starts = {name: _start_params(families[name]) for name in ordered}
        try:
            scores.append(float(value(starts, data)))
        except Exception:  # noqa: BLE001 - a model that fails at a start: the check reports it
            scores.append(float("nan"))
    if only_off_nonfinite and math.isfinite(scores[1]):
        return zero
    if math.isfinite(scores[1]) and not scores[0] >= scores[1]:
        return zero
    return median


def _start_params(family) -> dict:
    """The parameters of ``family``'s start that :func:`_better_starts` compares, in NumPy: a
    Gaussian's ``loc``, a Gamma's ``mean`` (its ``init_params``' inverse softplus)."""
    if isinstance(family, Gamma):
        mean = np.full(family.shape, family.init_mean - family.min_mean, np.float32)
        # numerics.inverse_softplus, in NumPy
        return {
            "mean": np.where(mean > 20.0, mean, np.log(np.expm1(np.minimum(mean, 20.0)))).astype(np.float32)
        }
    return {"loc": np.broadcast_to(np.asarray(family.init_loc, np.float32), _loc_shape(family))}


# A mixture's ordered latent's start is searched (:func:`_searched_ordered_starts`) from the
# chosen one and ORDERED_SEARCH_STARTS more, each NumPyro's ``init_to_uniform`` (uniform on
# (-2, 2) in the unconstrained space), by ORDERED_SEARCH_STEPS Adam steps of
# ORDERED_SEARCH_RATE on the point log density (the steps cost little against the compilation:
# 0.72 s at 1 step, 0.78 at 200, 0.98 at 1,000 on a Poisson mixture).
ORDERED_SEARCH_STARTS = 8
ORDERED_SEARCH_STEPS = 200
ORDERED_SEARCH_RATE = 0.1


def _is_mixture(fn) -> bool:
    """``fn`` (a site's distribution, under its ``Independent``/``Expanded`` wrappers) is one of
    NumPyro's mixtures (``MixtureSameFamily``, ``MixtureGeneral``)."""
    from numpyro.distributions.mixtures import _MixtureBase

    return isinstance(_unwrapped(fn)[0], _MixtureBase)


def _searched_ordered_starts(families, joint, data, protected):
    """``families`` with each ordered latent (a :class:`TransformedNormal` not in ``protected``,
    the user's) started where a short search of the point log density found the model's best.
    Run for models with a mixture site (:func:`_is_mixture`): the search compiles the model's
    gradient (0.5-0.7 s), and an ordered logistic regression's cut points, whose likelihood has
    one optimum, ran the same 3,375 iterations from its end as from 0.

    A mixture's ordered locations have one optimum per way of sharing the clusters among the
    components, and no start that ignores the data finds the best one on every data set: from
    the prior's median (-6.5, -3.5, 4.9) a three-component mixture of clusters at -4, 0 and 5
    put two components on the first (ELBO -413.7), from 0 (locations 0, 1, 2) and from NumPyro's
    random start two on the second (-407.5; NumPyro SVI and one NUTS chain ended there too),
    and from the clusters themselves the fit reached -374.0. From the prior's median the search
    reached the clusters (-4.2, 0.3, 5.3), and the fit from there -374.0. The search runs Adam on
    ``log p(x, T(u)) + log |J_T(u)|`` over the ordered latents' ``u`` (the others held at their
    initial means) from the chosen start and ``ORDERED_SEARCH_STARTS`` uniform ones, all in one
    compiled program (``vmap`` over the starts, ``scan`` over the steps), and the highest end
    is the start (unchanged where no end is finite, or the model fails there)."""
    import optax

    from grepvi.target import inputs_at_means

    ordered = [
        name
        for name, family in families.items()
        if name not in protected and isinstance(family, TransformedNormal) and family.ordered
    ]
    if not ordered:
        return families
    rng = np.random.default_rng(0)
    starts = {}
    for name in ordered:
        shape = _loc_shape(families[name])
        chosen = np.broadcast_to(np.asarray(families[name].init_loc, np.float32), shape)
        uniform = rng.uniform(-2.0, 2.0, (ORDERED_SEARCH_STARTS,) + shape).astype(np.float32)
        starts[name] = np.concatenate([chosen[None], uniform])
    optimizer = optax.adam(ORDERED_SEARCH_RATE)

    @functools.partial(jax.jit, compiler_options=once_compiler_options())
    def search(starts, data):
        params = {name: family.init_params() for name, family in families.items()}

        def objective(locs):
            moved = {**params, **{name: {**params[name], "loc": locs[name]} for name in ordered}}
            value = joint.logdensity_fn(inputs_at_means(moved, families, True), data)
            for name in ordered:  # the density of u: the target's is that of z = T(u)
                bijection = families[name].transform_
                value = value + jnp.sum(bijection.log_abs_det_jacobian(locs[name], bijection(locs[name])))
            return value

        def step(carry, _):
            locs, state = carry
            grad = jax.grad(lambda x: -objective(x))(locs)
            updates, state = optimizer.update(grad, state, locs)
            return (optax.apply_updates(locs, updates), state), None

        def one(locs):
            (locs, _), _ = jax.lax.scan(step, (locs, optimizer.init(locs)), None, ORDERED_SEARCH_STEPS)
            return locs, objective(locs)

        return jax.vmap(one)(starts)

    try:
        ends, values = search(starts, data)
        values = np.asarray(values, np.float64)
    except Exception:  # noqa: BLE001 - a model that fails at a start: the check reports it
        return families
    values = np.where(np.isfinite(values), values, -np.inf)
    best = int(np.argmax(values))
    if not np.isfinite(values[best]):
        return families
    return {
        name: dataclasses.replace(family, init_loc=np.asarray(ends[name][best], np.float32))
        if name in ordered
        else family
        for name, family in families.items()
    }


PRIOR_MEDIAN_DRAWS = 15  # prior draws whose elementwise median starts an ordered latent (init_to_median's)


def _ordered(site) -> bool:
    """A latent site on an ordered vector (or a positive ordered one)."""
    return not site["is_observed"] and is_ordered(_site_support(site["fn"]))


def _prior_median(site, rng_key):
    """The elementwise median of ``PRIOR_MEDIAN_DRAWS`` draws of the site's prior (NumPyro's
    ``init_to_median``), where the site's ordered latent starts
    (:func:`_ordered_start`)."""
    draws = site["fn"].sample(jax.random.fold_in(rng_key, 1), (PRIOR_MEDIAN_DRAWS,))
    return jnp.median(draws, axis=0)


def _loc_shape(family) -> tuple:
    """The shape of a Gaussian-based family's ``loc`` (its unconstrained shape where it has one)."""
    return tuple(getattr(family, "unconstrained_shape", family.shape))


def _centred_start(family, site):
    """``family`` (a :class:`~grepvi.families.normal.Normal` on a real-valued site) started at the
    site's prior centre given the sites before it (:func:`_prior_center_or_uniform`), where
    that is finite and not 0 (else as it was).

    The unconstrained 0 knows nothing of the prior's location: a growth curve's intercept
    with a ``Normal(250, 100)`` prior (weights near 240 g) started at 0, its ELBO at -6e7, the
    natural rule's trial diverged, and Adam's ran 200,000 iterations without converging
    (non-centred rat effects took up the 240 g). Started at 250, the fit converged in 4,050
    iterations, 31 nats higher. Whether this start or 0 is kept is the model's call
    (:func:`_better_starts`)."""
    centre = site.get("prior_center")
    if centre is None or type(family) is not Normal:
        return family
    centre = np.asarray(centre, np.float32)
    if centre.shape != tuple(family.shape) or not np.all(np.isfinite(centre)) or not np.any(centre):
        return family
    return dataclasses.replace(family, init_loc=centre)


def _positive_start(family, site):
    """``family`` (a :class:`~grepvi.Gamma` on a positive site) started at its site's prior
    median (:func:`_positive_center`) where that is finite, positive and one number for the
    whole site (else as it was). Used only where the model is not finite at the default start
    (:func:`from_numpyro`): a one-compartment oral dose's concentration divides by ``ka - ke``,
    NaN (0 / 0) where both rates start at 1; NumPyro's ``init_to_median`` starts ``ke`` at its prior's
    median, 0.14, and so does this."""
    centre = site.get("prior_center")
    if centre is None or type(family) is not Gamma:
        return family
    centre = np.asarray(centre, np.float64)
    if centre.size == 0 or not np.all(np.isfinite(centre)) or not np.all(centre > 0):
        return family
    if not np.all(centre == centre.flat[0]) or not centre.flat[0] > family.min_mean:
        return family
    return dataclasses.replace(family, init_mean=float(centre.flat[0]))


def _ordered_start(family, site):
    """``family`` (a :class:`TransformedNormal` on an ordered vector) started at the unconstrained
    image of its site's prior median, where that is finite (else as it was).

    An ordered vector's unconstrained start of 0 puts its elements 1 apart whatever the
    prior's scale: a three-component normal mixture whose data sat at -4, 0 and 5 started at
    0, 1 and 2, its three components merged into one (ELBO -421 against -377; NumPyro's
    AutoNormal, started at random, found the three). From the prior's median (-6.5, -3.5
    and 4.9 for ordered ``Normal(0, 10)`` draws) the default fit finds them. Whether this
    start or 0 is kept is the model's call (:func:`_better_starts`)."""
    median = site.get("prior_median")
    if median is None or not isinstance(family, TransformedNormal):
        return family
    inverse = jax.jit(lambda x: family.transform_.inv(x), compiler_options=once_compiler_options())
    start = np.asarray(inverse(np.asarray(median, np.float32)), np.float32)  # one program, not op by op
    if start.shape != tuple(family.unconstrained_shape) or not np.all(np.isfinite(start)):
        return family
    return dataclasses.replace(family, init_loc=start)


class _Restructured(Exception):
    """A second trace of the model has other sites or shapes than the first."""


def _structure(trace) -> tuple:
    return tuple((name, site["type"], tuple(jnp.shape(site.get("value")))) for name, site in trace.items())


def _eager_trace(trace_model, data, seed):
    trace = trace_model({}, data, seed)
    centres = _prior_centres(trace_model, data, seed)
    log_probs = {}
    for name, site in _sample_sites(trace).items():
        site["support"] = _site_support(site["fn"])
        log_probs[name] = _site_log_prob(site)
        if _ordered(site):
            site["prior_median"] = _prior_median(site, seed_key_data(seed))
        if name in centres:
            site["prior_center"] = np.asarray(centres[name])
    return trace, log_probs


def _prior_centres(trace_model, data, seed) -> dict:
    """The real-valued latent sites' prior centres (:func:`_prior_center_or_uniform`, one run
    of the model), and the positive ones' (:func:`_positive_center`, recorded in the same run
    where their values stay :func:`_uniform_or_prior`'s), or none where that run fails (the
    sites keep their default start)."""
    positive = {}

    def substitute(site):
        if _positive(site):
            try:
                positive[site["name"]] = _positive_center(site)
            except Exception:  # noqa: BLE001 - that site keeps its default start, the others their centres
                pass
        return _prior_center_or_uniform(site)

    try:
        centred = _sample_sites(trace_model({}, data, seed, substitute))
    except Exception:  # noqa: BLE001 - a model that cannot run at its centres: the old start
        return {}
    return {**positive, **{name: site["value"] for name, site in centred.items() if _real_valued(site)}}


def _positive(site) -> bool:
    """A latent site whose support is the positive half-line (elementwise)."""
    from numpyro.distributions import constraints

    return _latent_support(site) in (
        constraints.positive,
        constraints.softplus_positive,
        constraints.nonnegative,
    )


def _positive_center(site):
    """A positive site's prior median given the sites before it (its mean where the median is
    not finite; 1 where neither is), as NumPyro's ``init_to_median``. Staged."""
    shape, candidates = _centre_candidates(site)
    value = jnp.ones(shape, jnp.float32)
    for candidate in candidates:
        value = jnp.where(jnp.isfinite(candidate) & (candidate > 0), candidate, value)
    return value


def _base_name(fn) -> str:
    """The distribution's own name under NumPyro's wrappers (``expand``, ``to_event``, masks)."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    name = type(fn).__name__
    for suffix in ("Probs", "Logits"):  # dist.Categorical(probs=...) is CategoricalProbs
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def _support_moves(first, second) -> bool:
    """Whether a latent's support differs between two prior draws (its bounds are other
    latents: ``Uniform(0, tau)``, ``TruncatedNormal(low=lo)``)."""
    from numpyro.distributions import constraints

    a, b = first, second
    while isinstance(a, constraints.independent) and isinstance(b, constraints.independent):
        a, b = a.base_constraint, b.base_constraint
    bounds_a, bounds_b = _bounds(a), _bounds(b)
    if bounds_a is None or bounds_b is None:
        return False
    return not all(
        np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
        for x, y in zip(bounds_a, bounds_b, strict=True)
    )


def _moving_family(name, info, choice=None) -> Family:
    """The family of a latent site whose support moves with other latents: a real-valued one
    on its unconstrained coordinate ``u`` (:class:`~grepvi.Normal`, or ``choice`` where it is a
    real-valued family or ``"normal"``)."""
    from numpyro.distributions import constraints

    if choice is None:
        return Normal(shape=info.shape)
    family = family_for_support(name, constraints.real, info.shape, info.event_ndim, choice, hint=False)
    if family.support != "real":
        raise ModelError(
            f"site {name!r}: its support {info.support!r} moves with other latents, so it is fitted on "
            f"its unconstrained coordinate (the real line); families[{name!r}] must be a real-valued "
            f"family there (e.g. 'normal'), got {type(family).__name__} (support {family.support!r})"
        )
    return family


def _substituted(latents, moving, site):
    """NumPyro's ``substitute_fn`` of a run at ``latents``: a moving site's value from its
    ``u`` (``biject_to`` of the support this run's other latents set), the others' as
    given (None: the site runs as it would)."""
    name = site.get("name")
    if name not in latents:
        return None
    if name in moving and site.get("type") == "sample":
        from numpyro.distributions.transforms import biject_to

        return biject_to(site["fn"].support)(latents[name])
    return latents[name]


def moving_log_prob(site, u):
    """A moving latent site's density in its unconstrained coordinate: ``log p(z) + log |dz /
    du|`` at ``z = biject_to(support)(u)`` (the site's value in this run), over its batch
    shape. With it, ``q`` on ``u`` is fitted to the posterior of ``u``, whose image is the
    posterior of ``z``: NumPyro's NUTS unconstrains such a site the same way (its potential
    energy); NumPyro 0.22's ``AutoNormal`` takes the support from its first trace instead, and
    its answers put draws outside the support the other latents set
    (``benchmarks/moving_support_models.py``)."""
    from numpyro.distributions.transforms import biject_to

    value = site["value"]  # biject_to(support)(u), substituted in this run (_substituted): not again
    return site["fn"].log_prob(value) + biject_to(site["fn"].support).log_abs_det_jacobian(u, value)


def _check_observed(name, site, log_prob) -> None:
    """ModelError where an observed site's data hold NaN and its log density is not finite
    there (the fit could not start: ``log p`` would be NaN at every point)."""
    value = np.asarray(site["value"])
    if not np.issubdtype(value.dtype, np.floating) or not np.any(np.isnan(value)):
        return
    if np.all(np.isfinite(np.asarray(log_prob))):  # masked out (handlers.mask): read by nothing
        return
    where = np.argwhere(np.isnan(value))
    raise ModelError(
        f"site {name!r}: its observed data hold {len(where)} NaN value(s) (the first at index "
        f"{tuple(int(i) for i in where[0])}), where its log density is NaN; drop those entries, or "
        "sample the missing ones as a latent site of their own and observe the others"
    )


def _check_enumerated(enumerated, subsampled, families) -> None:
    """ModelError where discrete latent sites cannot be summed out as the model asks: a family
    given for one, or a subsampled plate (the marginal is of every row)."""
    for name in enumerated:
        if name in families:
            raise ModelError(
                f"families[{name!r}]: site {name!r} is a discrete latent site, summed out by enumeration "
                "(it has no variational family); give families for continuous latent sites only"
            )
    if subsampled:
        plate = sorted(subsampled)[0]
        raise ModelError(
            f"site {enumerated[0]!r}: a discrete latent site is summed out over every row, and plate "
            f"{plate!r} subsamples its rows; drop subsample_size (grepvi chooses minibatches itself where "
            "the data are large), or marginalize the discrete site by hand"
        )


def _user_trace(model, args, kwargs):
    """One trace of the model as the user wrote it (NumPyro draws a subsampled plate's rows).
    The trace is abstract (``jax.eval_shape``: nothing compiles; its plates' sizes, the sites'
    names and distributions' types are static), eager where the model cannot be traced."""
    _, handlers = numpyro_modules()

    def user_trace():
        substituted = handlers.substitute(handlers.seed(model, rng_seed=0), substitute_fn=_uniform_or_prior)
        return handlers.trace(substituted).get_trace(*args, **kwargs)

    args, kwargs = _on_host((args, kwargs))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Out-of-support values", UserWarning)
        warnings.filterwarnings("ignore", "subsample_size does not match", UserWarning)  # refused below
        captured = {}

        def capture():  # the trace's static parts outlive the abstract run; nothing is returned
            captured["trace"] = user_trace()

        try:
            jax.eval_shape(capture)
            return captured["trace"]
        except Exception:  # noqa: BLE001 - a model that cannot be traced abstractly
            return user_trace()


# A JAX array of the data up to this size (or on the CPU) is read as a NumPy array by the
# model's first trace (:func:`_user_trace`).
HOST_TRACE_MAX_ELEMENTS = 2**22


def _on_host(tree):
    """``tree`` with its concrete JAX arrays as NumPy arrays, where they are on the CPU or of at
    most ``HOST_TRACE_MAX_ELEMENTS`` elements.

    The first trace only reads the model's structure, but NumPyro checks its distributions'
    arguments on the concrete data there (a ``Binomial``'s counts are integers and
    non-negative: ``remainder``, ``equal``, ``greater_equal``, ``bitwise_and``, ``all``): on JAX
    arrays each of those operations compiled a program of its own in a fresh process (rat
    tumours: 0.24 s before anything else), on NumPy arrays NumPy computes them."""

    def host(leaf):
        if not isinstance(leaf, jax.Array) or isinstance(leaf, jax.core.Tracer):
            return leaf
        try:
            on_cpu = all(device.platform == "cpu" for device in leaf.devices())
            if on_cpu or leaf.size <= HOST_TRACE_MAX_ELEMENTS:
                return np.asarray(leaf)
        except Exception:  # noqa: BLE001 - a leaf NumPy cannot read (deleted, sharded): as given
            pass
        return leaf

    return jax.tree_util.tree_map(host, tree)


def _subsampled_plates(trace, data) -> tuple[dict, set]:
    """The plates of ``trace`` (:func:`_user_trace`) with ``subsample_size < size``
    (:class:`SubsampledPlate`), and the names of its sample sites."""
    out = {}
    for name, site in trace.items():
        if site["type"] != "plate":
            continue
        size, subsample_size = site["args"][:2]
        if subsample_size is not None and int(subsample_size) > int(size):
            raise ModelError(
                f"plate {name!r}: subsample_size {int(subsample_size)} is larger than its size {int(size)}; "
                f"expected 1..{int(size)} (or no subsample_size, for every row)"
            )
        if subsample_size is None or int(subsample_size) == int(size):
            continue
        frame = site["cond_indep_stack"][-1] if site.get("cond_indep_stack") else None
        dim = int(frame.dim) if frame is not None and frame.dim is not None else -1
        axes = tuple(
            tuple(i for i, length in enumerate(jnp.shape(leaf)) if length == int(size)) for leaf in data
        )
        out[name] = SubsampledPlate(name, int(size), int(subsample_size), dim, axes)
    return out, set(_sample_sites(trace))


PLATE_INDICES = "grepvi_plate_indices"


def _check_indexed(trace_model, data, plates, sites) -> None:
    """ModelError where an observed site inside a subsampled plate does not follow the plate's
    indices (its data not indexed: every step would see all rows, scaled by ``size / B``)."""
    if not plates:
        return
    batch = {name: jnp.arange(plate.subsample_size) for name, plate in plates.items()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Out-of-support values", UserWarning)
        trace = trace_model({}, tuple(data[:-1]) + (batch,), 0)
    for name, info in sites.items():
        for position, axis in enumerate(info.axes):
            if not info.observed or axis not in plates:
                continue
            rows = jnp.shape(trace[name]["value"])[position : position + 1]
            if rows != (plates[axis].subsample_size,):
                raise ModelError(
                    f"site {name!r} is inside the subsampled plate {axis!r} (size {plates[axis].size}, "
                    f"subsample_size {plates[axis].subsample_size}) but observes all rows: index its data "
                    f"with the plate's indices (`with numpyro.plate({axis!r}, N, subsample_size=B) as idx:` "
                    f"... `obs=y[idx]`, or `numpyro.subsample(y, event_dim=0)`)"
                )


def _indexed_model(model, data, rebuild, plates):
    """``(model, data, rebuild)`` with the subsampled plates' indices as an argument: the model
    called with ``grepvi_plate_indices={plate: indices}`` (NumPyro's ``substitute`` on the plate
    site: its sites see those rows, scaled by ``size / len(indices)``), and ``data`` ending
    with ``{plate: arange(size)}`` (all rows, unscaled)."""
    _, handlers = numpyro_modules()

    def indexed(*args, **kwargs):
        indices = kwargs.pop(PLATE_INDICES)
        with warnings.catch_warnings():  # len(indices) is not the plate's subsample_size: intended
            warnings.filterwarnings("ignore", "subsample_size does not match", UserWarning)
            return handlers.substitute(model, data=indices)(*args, **kwargs)

    def indexed_rebuild(values):
        call_args, call_kwargs = rebuild(values[:-1])
        return call_args, {**call_kwargs, PLATE_INDICES: values[-1]}

    every_row = {name: jnp.arange(plate.size) for name, plate in plates.items()}
    return indexed, tuple(data) + (every_row,), indexed_rebuild

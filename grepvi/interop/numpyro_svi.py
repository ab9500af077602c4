"""G-REP inside NumPyro's SVI: a mean-field guide of grepvi's families and an ELBO whose gradient is G-REP.

A NumPyro user changes two lines of a script::

    guide = AutoNormal(model)                          ->  guide = GrepGuide(model)
    svi = SVI(model, guide, optim, Trace_ELBO())       ->  svi = SVI(model, guide, optim, GrepELBO())

:class:`GrepGuide` picks each latent site's family from its support (as
:func:`grepvi.interop.numpyro_model.from_numpyro`: gamma, beta, Dirichlet, normal) and registers the
families' unconstrained parameters as NumPyro params (``"<site>__<parameter>"``); called as a
guide (``Predictive``, ``Trace_ELBO``, ``TraceMeanField_ELBO``) it draws every site from its
family inside the model's plates, as a NumPyro distribution (:func:`numpyro_distribution`:
NumPyro's own gamma, beta and Dirichlet, whose implicit reparameterization gradients are
unbiased), so NumPyro's ELBOs fit it correctly too.
:class:`GrepELBO` is a NumPyro ELBO whose loss is ``-ELBO`` in value and whose gradient is minus
G-REP with the Markov blankets read off the plates (``g_rep + g_corr + grad H``, paper Eqs.
7-8, the surrogate of :func:`grepvi.estimators.grep.grep_surrogate`, with the baseline).
NumPyro is an optional extra.
"""

import jax
import jax.numpy as jnp

from grepvi.errors import ModelError
from grepvi.estimators.base import sample_standardized
from grepvi.estimators.grep import baseline_log_joints, grep_surrogate
from grepvi.interop.numpyro_model import from_numpyro, numpyro_modules, split_arguments
from grepvi.target import bind_data

__all__ = ["GrepGuide", "GrepELBO", "numpyro_distribution"]

SEPARATOR = "__"


def numpyro_distribution(family, params):
    """``q(z; v)`` of a grepvi family as a NumPyro distribution (batch shape: the family's).

    Gamma, Beta and Dirichlet are NumPyro's own (their samplers have implicit
    reparameterization gradients: unbiased under NumPyro's ELBOs); the Gaussian families are
    transformed Normals (plain reparameterization); :class:`~grepvi.families.transformed.Affine`
    is NumPyro's ``AffineTransform`` of its base. Other families are wrapped as they are
    (:class:`FamilyDistribution`).
    """
    import numpyro.distributions as dist
    from numpyro.distributions import transforms

    from grepvi.families import Beta, Dirichlet, Gamma, LogitNormal, LogNormal, Normal
    from grepvi.families.transformed import Affine, TransformedNormal

    if isinstance(family, Affine):
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
        affine = transforms.AffineTransform(jnp.asarray(family.loc, dtype), jnp.asarray(family.scale, dtype))
        return dist.TransformedDistribution(numpyro_distribution(family.base, params), affine)
    natural = family.natural_params(params)
    if type(family) is Gamma:
        return dist.Gamma(natural["concentration"], natural["rate"])
    if type(family) is Beta:
        return dist.Beta(natural["concentration1"], natural["concentration0"])
    if type(family) is Dirichlet:
        return dist.Dirichlet(natural["concentration"])
    if type(family) is Normal:
        return dist.Normal(natural["loc"], natural["scale"])
    if type(family) is LogNormal:
        return dist.LogNormal(natural["loc"], natural["scale"])
    if type(family) is LogitNormal:
        return dist.TransformedDistribution(
            dist.Normal(natural["loc"], natural["scale"]), transforms.SigmoidTransform()
        )
    if isinstance(family, TransformedNormal):
        base = dist.Normal(natural["loc"], natural["scale"]).to_event(family.unconstrained_event_ndim)
        return dist.TransformedDistribution(base, family.transform_)
    return FamilyDistribution(family, params)


def _family_distribution_class():
    import numpyro.distributions as dist

    class FamilyDistribution(dist.Distribution):
        """A grepvi family as a NumPyro distribution: ``sample`` is ``T(eps; v)`` (pathwise),
        ``log_prob`` the family's. Its reparameterization gradient is unbiased for a family
        whose standardized variable does not depend on ``v`` (a location-scale family); for
        others NumPyro's ELBOs miss G-REP's correction term: use :class:`GrepELBO`."""

        reparametrized_params = []

        def __init__(self, family, params):
            self.family, self.params = family, params
            shape = tuple(family.shape)
            split = len(shape) - family.event_ndim
            super().__init__(batch_shape=shape[:split], event_shape=shape[split:])

        @property
        def support(self):
            from numpyro.distributions import constraints

            return {
                "positive": constraints.positive,
                "unit_interval": constraints.unit_interval,
                "simplex": constraints.simplex,
            }.get(self.family.support, constraints.real)

        def sample(self, key, sample_shape=()):
            eps = self.family.sample_standardized(self.params, key, sample_shape)
            return self.family.transform(self.params, jax.lax.stop_gradient(eps))

        def log_prob(self, value):
            return self.family.log_prob(self.params, value)

    return FamilyDistribution


def FamilyDistribution(family, params):  # noqa: N802 - builds the class (NumPyro is an optional extra)
    """A grepvi family as a NumPyro distribution (see ``_family_distribution_class``)."""
    return _family_distribution_class()(family, params)


class GrepGuide:
    """A mean-field guide of grepvi's families for ``model`` (see the module docstring).

    Each latent site is drawn inside the model's own plates (same names, sizes and dims), with
    the site's event dims: NumPyro's ``Trace_ELBO``, ``TraceMeanField_ELBO`` and
    ``Predictive`` accept it, and their gradients are unbiased (NumPyro's reparameterized
    samplers of the same ``q``: implicit gradients for gamma, beta and Dirichlet). With
    :class:`GrepELBO` the gradient is G-REP.

    Args:
      model: the NumPyro model.
      families: optional ``{site: family or family name}`` overrides.
      seed: key of the families' initial parameters.
    """

    def __init__(self, model, families=None, seed: int = 0):
        self.model = model
        self.family_choices = dict(families or {})
        self.seed = seed
        self.adapted = None

    def setup(self, *args, **kwargs):
        """Adapts the model to its arguments (on the first call)."""
        if self.adapted is None:
            _, handlers = numpyro_modules()
            with handlers.block():  # the model's own trace must not reach an enclosing handler
                adapted = from_numpyro(self.model, *args, families=self.family_choices, **kwargs)
            for name, site in adapted.sites.items():
                inside = [plate for plate, *_ in site.plates if plate in adapted.subsampled]
                if not site.observed and inside:
                    raise ModelError(
                        f"GrepGuide: latent site {name!r} is inside the subsampled plate {inside[0]!r}; "
                        "local latents of a subsampled plate need an amortized guide (not provided)"
                    )
            self.adapted = adapted
        return self.adapted

    @property
    def families(self):
        if self.adapted is None:
            raise ModelError("GrepGuide: call it once with the model's arguments (SVI.init does)")
        return self.adapted.families

    def params(self, param_map) -> dict:
        """The families' parameters ``{site: {name: array}}`` from NumPyro's ``param_map``."""
        out = {}
        for site in self.families:
            prefix = site + SEPARATOR
            out[site] = {
                key[len(prefix) :]: value for key, value in param_map.items() if key.startswith(prefix)
            }
        return out

    def __call__(self, *args, **kwargs):
        import contextlib

        numpyro, _ = numpyro_modules()

        adapted = self.setup(*args, **kwargs)
        names = sorted(self.families)
        keys = dict(zip(names, jax.random.split(jax.random.key(self.seed), len(names)), strict=True))
        draws = {}
        # The model's order (NumPyro's TraceMeanField_ELBO checks it).
        for site in [name for name in adapted.sites if name in self.families]:
            family, key = self.families[site], keys[site]
            initial = family.init_params(key)
            params = {
                name: numpyro.param(f"{site}{SEPARATOR}{name}", value) for name, value in initial.items()
            }
            info = adapted.sites[site]
            distribution = numpyro_distribution(family, params)
            extra = info.event_ndim - len(distribution.event_shape)
            if extra > 0:
                distribution = distribution.to_event(extra)
            with contextlib.ExitStack() as plates:
                for name, size, dim in info.plates:
                    plates.enter_context(numpyro.plate(name, size, dim=dim))
                draws[site] = numpyro.sample(site, distribution)
        return draws


class GrepELBO:
    """NumPyro ELBO with the G-REP gradient (see the module docstring); the guide must be a
    :class:`GrepGuide`.

    Args:
      num_particles: draws averaged per step.
      baseline: subtract the local log joints at the means in ``g_corr`` (unbiased; default).
    """

    can_infer_discrete = False

    def __init__(self, num_particles: int = 1, baseline: bool = True):
        self.num_particles = int(num_particles)
        self.baseline = bool(baseline)

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        if not isinstance(guide, GrepGuide):
            raise ModelError("GrepELBO: the guide must be a grepvi.interop.numpyro_svi.GrepGuide")
        adapted = guide.setup(*args, **kwargs)
        data, _ = split_arguments(args, kwargs)
        if adapted.subsampled:  # a fresh batch of the plate's rows every step (NumPyro scales them)
            rng_key, batch_key = jax.random.split(rng_key)
            data = adapted.with_plate_indices(data, batch_key)
        target = bind_data(adapted.target(), data)
        params = guide.params(param_map)
        baseline = baseline_log_joints(params, target) if self.baseline else None

        def one(key):
            eps = sample_standardized(key, params, target.families)
            return grep_surrogate(params, eps, target, baseline)[0]

        values = jax.vmap(one)(jax.random.split(rng_key, self.num_particles))
        return -jnp.mean(values)

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        return {"loss": self.loss(rng_key, param_map, model, guide, *args, **kwargs), "mutable_state": None}

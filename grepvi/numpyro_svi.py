"""G-REP inside NumPyro's SVI: a mean-field guide of grepvi's families and an ELBO whose gradient is G-REP.

A NumPyro user changes two lines of a script::

    guide = AutoNormal(model)                          ->  guide = GrepGuide(model)
    svi = SVI(model, guide, optim, Trace_ELBO())       ->  svi = SVI(model, guide, optim, GrepELBO())

:class:`GrepGuide` picks each latent site's family from its support (as
:func:`grepvi.numpyro_model.from_numpyro`: gamma, beta, Dirichlet, normal) and registers the
families' unconstrained parameters as NumPyro params (``"<site>__<parameter>"``); called as a
guide (``Predictive``, ``Trace_ELBO``) it draws every site from its family.
:class:`GrepELBO` is a NumPyro ELBO whose loss is ``-ELBO`` in value and whose gradient is minus
G-REP with the Markov blankets read off the plates (``g_rep + g_corr + grad H``, paper Eqs.
7-8, the surrogate of :func:`grepvi.estimators.grep.grep_surrogate`, with the baseline).
NumPyro is an optional extra.
"""

import jax
import jax.numpy as jnp

from grepvi.errors import ModelError
from grepvi.estimators.base import bind_data, sample_standardized
from grepvi.estimators.grep import baseline_log_joints, grep_surrogate
from grepvi.numpyro_model import _numpyro, _split_arguments, from_numpyro

__all__ = ["GrepGuide", "GrepELBO"]

SEPARATOR = "__"


class GrepGuide:
    """A mean-field guide of grepvi's families for ``model`` (see the module docstring).

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
            _, handlers = _numpyro()
            with handlers.block():  # the model's own trace must not reach an enclosing handler
                self.adapted = from_numpyro(self.model, *args, families=self.family_choices, **kwargs)
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
        numpyro, _ = _numpyro()
        import numpyro.distributions as dist

        self.setup(*args, **kwargs)
        keys = jax.random.split(jax.random.key(self.seed), len(self.families))
        draws = {}
        for key, (site, family) in zip(keys, sorted(self.families.items()), strict=True):
            initial = family.init_params(key)
            params = {
                name: numpyro.param(f"{site}{SEPARATOR}{name}", value) for name, value in initial.items()
            }
            rng = numpyro.prng_key()
            value = family.sample(params, rng if rng is not None else key)
            log_q = jnp.sum(family.log_prob(params, value))
            draws[site] = numpyro.sample(
                site, dist.Delta(value, log_density=log_q).to_event(len(family.shape))
            )
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
            raise ModelError("GrepELBO: the guide must be a grepvi.numpyro_svi.GrepGuide")
        adapted = guide.setup(*args, **kwargs)
        data, _ = _split_arguments(args, kwargs)
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

"""Discrete latent sites of a NumPyro model summed out by enumeration, as NumPyro's NUTS does.

A NumPyro model with a discrete latent site (a mixture's ``z ~ Categorical(w)`` in a plate of
rows, a change point ``tau ~ Categorical(...)``, a zero-inflation indicator ``~ Bernoulli``)
has no gradient in that site. NumPyro's HMC and NUTS marginalize such sites before they start
(``numpyro.infer.util.initialize_model``: the model wrapped in ``enum(config_enumerate(model))``
and its potential computed by :func:`numpyro.contrib.funsor.log_density`, which sums each
enumerated site over its support by variable elimination along the plates):

.. math::

    \\log p(x, \\theta) = \\log \\sum_{z} p(x, z, \\theta)

(Obermeyer et al. 2019, "Tensor variable elimination for plated factor graphs"). grepvi fits
the continuous latents ``theta`` against the same marginal: :func:`marginalized` returns a
model whose sample sites are the continuous latents alone, each with its density masked, and
one factor (:data:`ENUMERATED_FACTOR`) holding the whole log joint with the discrete sites
summed out, computed by NumPyro's own enumeration (the ``funsor`` package; install
``grepvi[numpyro]``). The mean-field ``q`` is then over ``theta`` only: the discrete sites
are not approximated, their conditional ``p(z | x, theta)`` is exact and drawn from at each
draw of ``q`` (:func:`conditional_draws`).

The marginal model runs the user's model twice per evaluation: once with the discrete sites
at a value of their support and every density masked (the continuous latents' values, shapes,
supports and plates reach grepvi's adapter as usual; the discrete, observed and deterministic
sites stay inside), and once under enumeration with those values substituted.
"""

from collections.abc import Callable

import jax

from grepvi.errors import ModelError

__all__ = ["ENUMERATED_FACTOR", "conditional_draws", "discrete_sites", "marginalized", "max_plate_nesting"]

# the factor site of the marginal model: the log joint with the discrete sites summed out
ENUMERATED_FACTOR = "grepvi_enumerated"


def discrete_sites(trace) -> list[str]:
    """The latent sample sites of ``trace`` (a NumPyro trace) whose support is discrete."""
    return [
        name
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and site["fn"].support.is_discrete
    ]


def max_plate_nesting(trace) -> int:
    """The plates' deepest batch dimension in ``trace`` (``-min(frame.dim)``; 0: no plate), as
    NumPyro's ``_guess_max_plate_nesting``: enumerated dimensions go to its left."""
    dims = [
        frame.dim
        for site in trace.values()
        if site["type"] == "sample"
        for frame in site["cond_indep_stack"]
        if frame.dim is not None
    ]
    return -min(dims) if dims else 0


def _funsor_enumeration(sites: list[str]):
    try:
        from numpyro.contrib.funsor import config_enumerate, enum, log_density
    except ImportError as error:
        raise ModelError(
            f"site {sites[0]!r}: a discrete latent site is summed out by enumeration, which needs the "
            "funsor package (as NumPyro's NUTS does): pip install 'grepvi[numpyro]' (or pip install funsor)"
        ) from error
    return config_enumerate, enum, log_density


def _check_enumerable(trace, sites: list[str]) -> None:
    for name in sites:
        site = trace[name]
        fn = site["fn"]
        kind = type(fn).__name__
        if not fn.has_enumerate_support:
            raise ModelError(
                f"site {name!r}: a discrete latent site ({kind}) whose support cannot be enumerated; grepvi "
                "sums discrete latents out by enumeration (finite supports: Bernoulli, Categorical, "
                "DiscreteUniform, Binomial, ...): marginalize it by hand, or observe it"
            )
        mode = site.get("infer", {}).get("enumerate")
        if mode not in (None, "parallel"):
            raise ModelError(
                f"site {name!r}: infer={{'enumerate': {mode!r}}}; grepvi enumerates discrete sites in "
                "parallel only: mark it 'parallel' or leave it unmarked"
            )


def marginalized(model: Callable, trace, sites: list[str]) -> Callable:
    """``model`` with its discrete latent ``sites`` summed out (module docstring).

    Args:
      model: the NumPyro model as the user wrote it.
      trace: a trace of it (its sites' distributions and plates; abstract values suffice).
      sites: its discrete latent sites (:func:`discrete_sites`).

    Returns:
      A NumPyro model of the same arguments whose sample sites are ``model``'s continuous
      latents (densities masked) and the factor :data:`ENUMERATED_FACTOR`,
      ``log sum_z p(x, z, theta)``.

    Raises:
      ModelError: a site whose support cannot be enumerated or is marked for sequential
        enumeration, or ``funsor`` is not installed (naming the site).
    """
    from numpyro import factor, handlers

    _check_enumerable(trace, sites)
    config_enumerate, enum, log_density = _funsor_enumeration(sites)
    enumerated = enum(config_enumerate(model), -max_plate_nesting(trace) - 1)
    summed = frozenset(sites)

    def inside(message) -> bool:  # kept from grepvi's adapter: read in the enumerated run alone
        if message["type"] == "deterministic":
            return True
        return message["type"] == "sample" and (message["name"] in summed or message["is_observed"])

    def support_value(message):  # the discrete sites at a value of their support
        if message["name"] in summed:
            return message["fn"].enumerate_support(expand=True)[0]
        return None

    def summed_log_joint(args, kwargs, latents):
        # a seed of its own: a key asked inside (NumPyro's scan asks one; block lets such
        # requests through) is not split from the caller's seed inside this jit (a leaked
        # tracer); every site here is substituted or enumerated, so no draw reads it
        with handlers.block(), handlers.seed(rng_seed=0):
            return log_density(enumerated, args, kwargs, latents)[0]

    traced = {}  # by the arguments' static parts: funsor's Python runs once per shapes

    def marginal(*args, **kwargs):
        with handlers.block(hide_fn=inside), handlers.mask(mask=False):
            run = handlers.trace(handlers.substitute(model, substitute_fn=support_value))
            values = run.get_trace(*args, **kwargs)
        latents = {
            name: site["value"]
            for name, site in values.items()
            if site["type"] == "sample" and not inside(site)
        }
        factor(ENUMERATED_FACTOR, _cached(traced, summed_log_joint, (args, kwargs, latents)))

    return marginal


def _is_array(leaf) -> bool:
    return hasattr(leaf, "shape") and hasattr(leaf, "dtype")


def _cached(cache: dict, function: Callable, arguments):
    """``function(*arguments)`` through a ``jax.jit`` of it kept in ``cache`` by the arguments'
    tree and non-array leaves: later calls with arrays of the same shapes (in any trace: the
    adapter's, the step's ``vmap`` and ``grad``) reuse its jaxpr instead of running its Python
    again. Uncached where a non-array leaf cannot be hashed."""
    leaves, treedef = jax.tree_util.tree_flatten(arguments)
    where = tuple(_is_array(leaf) for leaf in leaves)
    static = tuple(None if array else leaf for array, leaf in zip(where, leaves, strict=True))
    try:
        key = (treedef, where, static)
        jitted = cache.get(key)
    except TypeError:  # an unhashable static leaf
        return function(*arguments)
    if jitted is None:

        def on_arrays(arrays):
            it = iter(arrays)
            filled = [next(it) if array else leaf for array, leaf in zip(where, static, strict=True)]
            return function(*jax.tree_util.tree_unflatten(treedef, filled))

        jitted = cache[key] = jax.jit(on_arrays)
    return jitted([leaf for array, leaf in zip(where, leaves, strict=True) if array])


def conditional_draws(model: Callable, trace, sites: list[str]) -> Callable:
    """``(latents, rng_key, *args, **kwargs) -> {site: value}``: a draw of the discrete
    ``sites`` from their conditional ``p(z | x, theta)`` at the continuous ``latents``
    (NumPyro's :func:`numpyro.contrib.funsor.infer_discrete` at temperature 1, forward
    filtering, backward sampling), and the model's ``numpyro.deterministic`` sites at that
    draw. ``vmap`` it over draws of ``q`` for the posterior of the discrete sites (a mixture's
    assignments, a change point), as NumPyro's ``Predictive`` of ``infer_discrete`` does
    after NUTS."""
    from numpyro import handlers
    from numpyro.contrib.funsor import config_enumerate, infer_discrete

    first_available_dim = -max_plate_nesting(trace) - 1
    names = [name for name, site in trace.items() if site["type"] == "deterministic"] + list(sites)

    def draw(latents, rng_key, *args, **kwargs):
        discrete_key, other_key = jax.random.split(rng_key)
        conditioned = handlers.substitute(config_enumerate(model), data=latents)
        sampled = infer_discrete(
            conditioned, first_available_dim=first_available_dim, temperature=1, rng_key=discrete_key
        )
        run = handlers.trace(handlers.seed(sampled, other_key)).get_trace(*args, **kwargs)
        return {name: run[name]["value"] for name in names}

    return draw

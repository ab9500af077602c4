"""Five models whose latent sites have a support bounded by other latents, written in the
sixty-seventh session as NumPyro users write them (``Uniform(lo, lo + width)``,
``TruncatedNormal(low=...)`` / ``high=...``). ``from_numpyro`` refused them until then; it now
fits such a site on its unconstrained coordinate (``docs/numpyro.md``).

The peers on these: NumPyro's NUTS unconstrains such a site per draw (its potential is right),
but reports a ``less_than`` one (``TruncatedNormal(high=ceiling)``) through the transform of its
first trace (NumPyro 0.22's ``_get_model_transforms`` flags only ``greater_than`` and interval
bounds as dynamic), so its posterior means of ``ceiling_groups``' ``mu`` are off by the
ceiling's change from that trace; NumPyro's ``AutoNormal`` takes every site's support from its
prototype trace, fixed bounds.

* ``truncated_at_latent``: a mean truncated below at a latent lower bound, 40 observations.
* ``uniform_between``: a value uniform between two latents, 30 noisy observations of it.
* ``ceiling_groups``: six group means truncated above at a shared latent ceiling, 60 rows.
* ``tank_sizes``: eight latent sizes each uniform on ``(0, theta)``, observed in noise,
  ``theta`` with a Pareto prior (the German-tank problem with noisy serial numbers).
* ``ordered_pair``: two group means, the second truncated below at the first.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["MOVING_MODELS"]

_RNG = np.random.default_rng(67)


def truncated_at_latent(y):
    import numpyro
    import numpyro.distributions as dist

    lo = numpyro.sample("lo", dist.Normal(-1.0, 1.0))
    m = numpyro.sample("m", dist.TruncatedNormal(0.0, 3.0, low=lo))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(m, 2.0), obs=y)


def uniform_between(y):
    import numpyro
    import numpyro.distributions as dist

    lo = numpyro.sample("lo", dist.Normal(0.0, 5.0))
    width = numpyro.sample("width", dist.Exponential(0.2))
    c = numpyro.sample("c", dist.Uniform(lo, lo + width))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(c, 1.0), obs=y)


def ceiling_groups(y, group, group_ids):
    import numpyro
    import numpyro.distributions as dist

    ceiling = numpyro.sample("ceiling", dist.Normal(5.0, 2.0))
    with numpyro.plate("groups", group_ids.shape[0]):
        mu = numpyro.sample("mu", dist.TruncatedNormal(0.0, 5.0, high=ceiling))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu[group], sigma), obs=y)


def tank_sizes(y):
    import numpyro
    import numpyro.distributions as dist

    theta = numpyro.sample("theta", dist.Pareto(50.0, 1.5))
    with numpyro.plate("tanks", y.shape[0]):
        size = numpyro.sample("size", dist.Uniform(0.0, theta))
        numpyro.sample("y", dist.Normal(size, 5.0), obs=y)


def ordered_pair(y, group):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.TruncatedNormal(0.0, 5.0, low=a))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(jnp.where(group == 1, b, a), 1.0), obs=y)


def _ceiling_data(groups=6, rows=60):
    group = _RNG.integers(0, groups, rows)
    means = np.array([0.0, 1.0, 2.0, 3.0, 3.5, 3.8])[:groups]
    y = (means[group] + _RNG.normal(0.0, 1.0, rows)).astype(np.float32)
    return y, group.astype(np.int32), np.arange(groups)


def _pair_data(rows=50):
    group = _RNG.integers(0, 2, rows)
    y = (np.where(group == 1, 0.6, 0.2) + _RNG.normal(0.0, 1.0, rows)).astype(np.float32)
    return y, group.astype(np.int32)


MOVING_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "truncated_at_latent",
            truncated_at_latent,
            (_RNG.normal(1.0, 2.0, 40).astype(np.float32),),
            "a mean truncated below at a latent bound (TruncatedNormal(low=lo))",
        ),
        TextbookModel(
            "uniform_between",
            uniform_between,
            (_RNG.normal(2.0, 1.0, 30).astype(np.float32),),
            "a value uniform between two latents (Uniform(lo, lo + width))",
        ),
        TextbookModel(
            "ceiling_groups",
            ceiling_groups,
            _ceiling_data(),
            "six group means under a latent ceiling (TruncatedNormal(high=ceiling))",
        ),
        TextbookModel(
            "tank_sizes",
            tank_sizes,
            (_RNG.uniform(0.0, 180.0, 8).astype(np.float32) + _RNG.normal(0.0, 5.0, 8).astype(np.float32),),
            "eight sizes uniform on (0, theta), Pareto theta (noisy German tanks)",
        ),
        TextbookModel("ordered_pair", ordered_pair, _pair_data(), "two means, the second above the first"),
    )
}

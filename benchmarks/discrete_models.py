"""Textbook NumPyro models with discrete latent sites, written as their tutorials write them:
the discrete site sampled, not marginalized by hand. NumPyro's NUTS sums such sites out by
enumeration before it starts (``funsor``); grepvi's ``from_numpyro`` does the same
(:mod:`grepvi.interop.enumeration`); NumPyro's SVI needs the user to hide them from the guide
and use ``TraceEnum_ELBO`` (``time_to_answer.py``'s ``svi`` contender does so). Data simulated
from this module's own seed:

* ``gaussian_mixture``: three Gaussian clusters of 60, 50 and 40 points at -3, 0.5 and 3 (sd
  0.7); weights ``Dirichlet(1)``, ordered locations, one shared scale; each point's assignment
  ``z ~ Categorical(w)`` in the data plate.
* ``change_point``: yearly counts of 111 years, Poisson with rate 3.0 before year 40 and 0.9
  after (the coal-mining disasters' shape); the switch year ``tau ~ Categorical`` uniform over
  the years, both rates ``Exponential(1)``.
* ``hidden_markov``: 100 observations of a two-state sticky Markov chain (stay 0.9), Gaussian
  emissions at -1 and 1.5 (sd 0.8); the transition rows ``Dirichlet([8, 2])`` / ``([2, 8])``,
  ordered emission locations, one scale; the states in ``numpyro.contrib.control_flow.scan``.
* ``dawid_skene``: Dawid and Skene's (1979) annotator model, 60 items of 3 classes labelled by
  4 annotators of accuracy 0.9, 0.8, 0.7 and 0.6 (else a uniform label); each annotator's
  confusion rows ``Dirichlet(1 + 4 I)``, the class frequencies ``Dirichlet(1)``, each item's
  true class ``c ~ Categorical(pi)`` in the item plate, the labels in a nested annotator plate.
"""

import jax.numpy as jnp
import numpy as np
from textbook_models import TextbookModel

__all__ = ["DISCRETE_MODELS"]

_RNG = np.random.default_rng(74)

MIXTURE_X = np.concatenate(
    [_RNG.normal(-3.0, 0.7, 60), _RNG.normal(0.5, 0.7, 50), _RNG.normal(3.0, 0.7, 40)]
).astype(np.float32)

_YEARS = 111
CHANGE_COUNTS = np.concatenate([_RNG.poisson(3.0, 40), _RNG.poisson(0.9, _YEARS - 40)]).astype(np.float32)

_STATES = [0]
for _ in range(99):
    _STATES.append(_STATES[-1] if _RNG.random() < 0.9 else 1 - _STATES[-1])
HMM_Y = (np.where(np.array(_STATES) == 0, -1.0, 1.5) + _RNG.normal(0.0, 0.8, 100)).astype(np.float32)

_ITEMS, _ANNOTATORS, _CLASSES = 60, 4, 3
_TRUE_CLASS = _RNG.integers(0, _CLASSES, _ITEMS)
_ACCURACY = np.array([0.9, 0.8, 0.7, 0.6])
ANNOTATIONS = np.where(
    _RNG.random((_ANNOTATORS, _ITEMS)) < _ACCURACY[:, None],
    _TRUE_CLASS[None, :],
    _RNG.integers(0, _CLASSES, (_ANNOTATORS, _ITEMS)),
).astype(np.int32)


def _ordered_locations(name, size, scale):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions.transforms import OrderedTransform

    base = dist.Normal(jnp.zeros(size), scale).to_event(1)
    return numpyro.sample(name, dist.TransformedDistribution(base, OrderedTransform()))


def gaussian_mixture(x):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = _ordered_locations("mu", 3, 3.0)
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("x", dist.Normal(mu[z], sigma), obs=x)


def change_point(counts):
    import numpyro
    import numpyro.distributions as dist

    years = counts.shape[0]
    tau = numpyro.sample("tau", dist.Categorical(jnp.ones(years) / years))
    early = numpyro.sample("early", dist.Exponential(1.0))
    late = numpyro.sample("late", dist.Exponential(1.0))
    rate = jnp.where(jnp.arange(years) < tau, early, late)
    with numpyro.plate("years", years):
        numpyro.sample("counts", dist.Poisson(rate), obs=counts)


def hidden_markov(y):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.control_flow import scan

    trans = numpyro.sample("trans", dist.Dirichlet(jnp.array([[8.0, 2.0], [2.0, 8.0]])).to_event(1))
    locs = _ordered_locations("locs", 2, 2.0)
    scale = numpyro.sample("scale", dist.HalfNormal(2.0))

    def step(previous, y_t):
        state = numpyro.sample("state", dist.Categorical(trans[previous]))
        numpyro.sample("y", dist.Normal(locs[state], scale), obs=y_t)
        return state, None

    scan(step, 0, y)


def dawid_skene(labels):
    import numpyro
    import numpyro.distributions as dist

    annotators, items = labels.shape
    with numpyro.plate("annotator", annotators, dim=-2), numpyro.plate("class", _CLASSES, dim=-1):
        confusion = numpyro.sample("confusion", dist.Dirichlet(jnp.ones(_CLASSES) + 4.0 * jnp.eye(_CLASSES)))
    pi = numpyro.sample("pi", dist.Dirichlet(jnp.ones(_CLASSES)))
    with numpyro.plate("item", items, dim=-1):
        c = numpyro.sample("c", dist.Categorical(pi))
        with numpyro.plate("annotators", annotators, dim=-2):
            numpyro.sample(
                "label", dist.Categorical(confusion[jnp.arange(annotators)[:, None], c]), obs=labels
            )


DISCRETE_MODELS = {
    "gaussian_mixture": TextbookModel(
        "gaussian_mixture",
        gaussian_mixture,
        (MIXTURE_X,),
        "Gaussian mixture, 3 components, 150 points, assignments z ~ Categorical (enumerated)",
    ),
    "change_point": TextbookModel(
        "change_point",
        change_point,
        (CHANGE_COUNTS,),
        "Poisson change point, 111 years, switch year tau ~ Categorical (enumerated)",
    ),
    "hidden_markov": TextbookModel(
        "hidden_markov",
        hidden_markov,
        (HMM_Y,),
        "two-state Gaussian HMM, 100 steps, states in a scan (enumerated)",
    ),
    "dawid_skene": TextbookModel(
        "dawid_skene",
        dawid_skene,
        (ANNOTATIONS,),
        "Dawid-Skene annotators, 60 items x 4 annotators, true classes c ~ Categorical (enumerated)",
    ),
}

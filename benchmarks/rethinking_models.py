"""Eight models of McElreath's *Statistical Rethinking* (2nd ed., 2020), written in the
fifty-ninth session as a reader of the book's NumPyro port (Phan's "Statistical Rethinking with
NumPyro") writes them, before anything was run on them: the book's priors and its centred forms
where the book first writes them so. Kline's island tools are the published counts (Kline &
Boyd 2010, ``data(Kline)``); the islands' distances are great-circle distances between
approximate coordinates (not the book's ``islandsDistMatrix``); the rest is simulated with this
module's own seed after the book's designs.

* ``reedfrogs`` (m13.2): 48 tanks of tadpoles, survivors binomial, the tanks' log-odds in a
  centred normal hierarchy, ``sigma ~ Exponential(1)``.
* ``chimpanzees`` (m13.4): 504 pulls, 7 actors, 6 blocks and 4 treatments, two centred
  varying intercepts (actors and blocks), a Bernoulli outcome.
* ``kline`` (m11.11): the islands' tools against population, the "scientific" model
  ``lambda = exp(a[contact]) P^b[contact] / g`` with exponential priors on ``b`` and ``g``.
* ``kline_gp`` (m14.8): the same with a Gaussian process over the islands' distances, the
  islands' effects ``k ~ MultivariateNormal(0, K)``, ``K = eta^2 exp(-rho^2 D^2) + 0.01 I``
  (centred, as the book writes it first), ``eta^2 ~ Exponential(2)``, ``rho^2 ~
  Exponential(0.5)``.
* ``cafes`` (m14.1): 20 cafes x 10 visits, varying intercepts and afternoon slopes drawn
  together from a ``MultivariateNormal`` whose covariance is ``diag(sigma) R diag(sigma)``,
  ``R ~ LKJ(2)`` (centred).
* ``howell_poly`` (m4.5): adult and child heights against standardized weight, a quadratic
  with a log-normal linear coefficient and ``sigma ~ Uniform(0, 50)``, 544 people.
* ``wines`` (the ``Wines2012`` exercises of chapters 8 and 13): 9 judges x 20 wines, scores
  normal with a wine's quality and a judge's harshness as centred varying effects (``q ~
  Normal(0, sigma_w)``), and the wine's origin.
* ``hurricanes`` (the ``Hurricanes`` exercise of chapter 12): deaths of 92 hurricanes, a
  gamma-Poisson (negative binomial) regression on the name's femininity and the minimum
  pressure, both standardized.
"""

import numpy as np
from textbook_models import TextbookModel

__all__ = ["RETHINKING_MODELS"]

_RNG = np.random.default_rng(59)


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reedfrogs(tanks=48):
    density = np.repeat([10, 25, 35], tanks // 3)
    a_tank = _RNG.normal(1.4, 1.6, tanks)
    surv = _RNG.binomial(density, _logistic(a_tank))
    return density.astype(np.float32), surv.astype(np.float32)


def reedfrogs(density, surv):
    import numpyro
    import numpyro.distributions as dist

    a_bar = numpyro.sample("a_bar", dist.Normal(0.0, 1.5))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    with numpyro.plate("tank", density.shape[0]):
        a = numpyro.sample("a", dist.Normal(a_bar, sigma))
        numpyro.sample("S", dist.Binomial(density, logits=a), obs=surv)


def _chimpanzees(actors=7, blocks=6, per_cell=3):
    actor = np.repeat(np.arange(actors), blocks * 4 * per_cell)
    block = np.tile(np.repeat(np.arange(blocks), 4 * per_cell), actors)
    treatment = np.tile(np.repeat(np.arange(4), per_cell), actors * blocks)
    a = np.array([-0.4, 4.5, -0.7, -0.7, -0.4, 0.5, 1.9])  # actor 2 nearly always pulls left
    g = _RNG.normal(0.0, 0.2, blocks)
    b = np.array([-0.1, 0.4, -0.5, 0.3])
    pulled = _RNG.binomial(1, _logistic(a[actor] + g[block] + b[treatment]))
    return (
        actor.astype(np.int32),
        block.astype(np.int32),
        treatment.astype(np.int32),
        pulled.astype(np.float32),
    )


def chimpanzees(actor, block, treatment, pulled_left):
    import numpyro
    import numpyro.distributions as dist

    a_bar = numpyro.sample("a_bar", dist.Normal(0.0, 1.5))
    sigma_a = numpyro.sample("sigma_a", dist.Exponential(1.0))
    sigma_g = numpyro.sample("sigma_g", dist.Exponential(1.0))
    with numpyro.plate("actors", 7):
        a = numpyro.sample("a", dist.Normal(a_bar, sigma_a))
    with numpyro.plate("blocks", 6):
        g = numpyro.sample("g", dist.Normal(0.0, sigma_g))
    with numpyro.plate("treatments", 4):
        b = numpyro.sample("b", dist.Normal(0.0, 0.5))
    logit_p = a[actor] + g[block] + b[treatment]
    with numpyro.plate("pulls", actor.shape[0]):
        numpyro.sample("pulled_left", dist.Binomial(logits=logit_p), obs=pulled_left)


# Kline & Boyd (2010): Malekula, Tikopia, Santa Cruz, Yap, Lau Fiji, Trobriand, Chuuk, Manus,
# Tonga, Hawaii
KLINE_POPULATION = np.array([1100, 1500, 3600, 4791, 7400, 8000, 9200, 13000, 17500, 275000], np.float64)
KLINE_TOOLS = np.array([13, 22, 24, 43, 33, 19, 40, 28, 55, 71], np.float64)
KLINE_CONTACT_HIGH = np.array([0, 0, 0, 1, 1, 1, 1, 0, 1, 0])
# approximate latitude, longitude (degrees east, 0-360) of the same islands
_KLINE_COORDINATES = np.array(
    [
        (-16.3, 167.5),
        (-12.3, 168.8),
        (-10.7, 165.9),
        (9.5, 138.1),
        (-18.0, 181.5),
        (-8.6, 151.1),
        (7.4, 151.8),
        (-2.1, 147.0),
        (-21.2, 184.8),
        (19.9, 204.4),
    ]
)


def _kline_distances():
    """Great-circle distances between the islands, thousands of km."""
    lat, lon = np.radians(_KLINE_COORDINATES).T
    cos = np.sin(lat[:, None]) * np.sin(lat[None]) + np.cos(lat[:, None]) * np.cos(lat[None]) * np.cos(
        lon[:, None] - lon[None]
    )
    return 6.371 * np.arccos(np.clip(cos, -1.0, 1.0))


def kline(population, contact, tools):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    with numpyro.plate("contact", 2):
        a = numpyro.sample("a", dist.Normal(1.0, 1.0))
        b = numpyro.sample("b", dist.Exponential(1.0))
    g = numpyro.sample("g", dist.Exponential(1.0))
    lam = jnp.exp(a[contact]) * population ** b[contact] / g
    with numpyro.plate("islands", tools.shape[0]):
        numpyro.sample("T", dist.Poisson(lam), obs=tools)


def kline_gp(distances, population, tools):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    etasq = numpyro.sample("etasq", dist.Exponential(2.0))
    rhosq = numpyro.sample("rhosq", dist.Exponential(0.5))
    n = tools.shape[0]
    kernel = etasq * jnp.exp(-rhosq * distances**2) + 0.01 * jnp.eye(n)
    k = numpyro.sample("k", dist.MultivariateNormal(jnp.zeros(n), covariance_matrix=kernel))
    a = numpyro.sample("a", dist.Exponential(1.0))
    b = numpyro.sample("b", dist.Exponential(1.0))
    g = numpyro.sample("g", dist.Exponential(1.0))
    lam = (a * population**b / g) * jnp.exp(k)
    with numpyro.plate("islands", n):
        numpyro.sample("T", dist.Poisson(lam), obs=tools)


def _cafes(cafes=20, visits=10):
    sigmas = np.array([1.0, 0.5])
    rho = -0.7
    cov = np.diag(sigmas) @ np.array([[1.0, rho], [rho, 1.0]]) @ np.diag(sigmas)
    effects = _RNG.multivariate_normal([3.5, -1.0], cov, cafes)
    cafe = np.repeat(np.arange(cafes), visits)
    afternoon = np.tile([0, 1], cafes * visits // 2)
    wait = _RNG.normal(effects[cafe, 0] + effects[cafe, 1] * afternoon, 0.5)
    return cafe.astype(np.int32), afternoon.astype(np.float32), wait.astype(np.float32)


def cafes(cafe, afternoon, wait):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(5.0, 2.0))
    b = numpyro.sample("b", dist.Normal(-1.0, 0.5))
    sigma_cafe = numpyro.sample("sigma_cafe", dist.Exponential(1.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    rho = numpyro.sample("Rho", dist.LKJ(2, 2.0))
    cov = jnp.outer(sigma_cafe, sigma_cafe) * rho
    with numpyro.plate("cafes", 20):
        effects = numpyro.sample(
            "a_b_cafe", dist.MultivariateNormal(jnp.stack([a, b]), covariance_matrix=cov)
        )
    mu = effects[cafe, 0] + effects[cafe, 1] * afternoon
    with numpyro.plate("visits", wait.shape[0]):
        numpyro.sample("wait", dist.Normal(mu, sigma), obs=wait)


def _howell(people=544):
    weight = np.concatenate([_RNG.uniform(4.0, 30.0, 190), _RNG.normal(45.0, 6.5, people - 190)])
    height = 60.0 + 6.0 * weight - 0.055 * weight**2  # children grow fast, adults level off
    height = np.clip(height, None, 175.0) + _RNG.normal(0.0, 5.5, people)
    weight_s = (weight - weight.mean()) / weight.std()
    return weight_s.astype(np.float32), height.astype(np.float32)


def howell_poly(weight_s, height):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(178.0, 20.0))
    b1 = numpyro.sample("b1", dist.LogNormal(0.0, 1.0))
    b2 = numpyro.sample("b2", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.Uniform(0.0, 50.0))
    mu = a + b1 * weight_s + b2 * weight_s**2
    with numpyro.plate("people", height.shape[0]):
        numpyro.sample("height", dist.Normal(mu, sigma), obs=height)


def _wines(judges=9, wines=20):
    judge = np.repeat(np.arange(judges), wines)
    wine = np.tile(np.arange(wines), judges)
    american = (np.arange(wines) >= 10).astype(np.float64)
    quality = _RNG.normal(0.0, 0.6, wines)
    harshness = _RNG.normal(0.0, 0.5, judges)
    score = _RNG.normal(quality[wine] - 0.2 * american[wine] + harshness[judge], 0.8)
    return (
        judge.astype(np.int32),
        wine.astype(np.int32),
        american.astype(np.float32),
        score.astype(np.float32),
    )


def wines(judge, wine, american, score):
    import numpyro
    import numpyro.distributions as dist

    sigma_w = numpyro.sample("sigma_w", dist.Exponential(1.0))
    sigma_j = numpyro.sample("sigma_j", dist.Exponential(1.0))
    origin = numpyro.sample("origin", dist.Normal(0.0, 0.5))
    with numpyro.plate("wines", 20):
        q = numpyro.sample("q", dist.Normal(0.0, sigma_w))
    with numpyro.plate("judges", 9):
        h = numpyro.sample("h", dist.Normal(0.0, sigma_j))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    mu = q[wine] + origin * american[wine] + h[judge]
    with numpyro.plate("scores", score.shape[0]):
        numpyro.sample("score", dist.Normal(mu, sigma), obs=score)


def _hurricanes(storms=92):
    femininity = _RNG.uniform(1.0, 11.0, storms)
    pressure = _RNG.normal(965.0, 20.0, storms)
    fem_s = (femininity - femininity.mean()) / femininity.std()
    pressure_s = (pressure - pressure.mean()) / pressure.std()
    mean = np.exp(2.5 + 0.1 * fem_s - 0.9 * pressure_s)
    deaths = _RNG.poisson(_RNG.gamma(0.6, mean / 0.6))
    return fem_s.astype(np.float32), pressure_s.astype(np.float32), deaths.astype(np.float32)


def hurricanes(femininity, pressure, deaths):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(3.0, 0.5))
    b_fem = numpyro.sample("b_fem", dist.Normal(0.0, 0.5))
    b_pressure = numpyro.sample("b_pressure", dist.Normal(0.0, 0.5))
    phi = numpyro.sample("phi", dist.Exponential(1.0))
    lam = jnp.exp(a + b_fem * femininity + b_pressure * pressure)
    with numpyro.plate("storms", deaths.shape[0]):
        numpyro.sample("deaths", dist.GammaPoisson(phi, phi / lam), obs=deaths)


RETHINKING_MODELS = {
    model.name: model
    for model in (
        TextbookModel(
            "reedfrogs", reedfrogs, _reedfrogs(), "reed frog tanks, centred varying intercepts (simulated)"
        ),
        TextbookModel(
            "chimpanzees",
            chimpanzees,
            _chimpanzees(),
            "chimpanzees, actors and blocks centred, 504 pulls (simulated)",
        ),
        TextbookModel(
            "kline",
            kline,
            (KLINE_POPULATION, KLINE_CONTACT_HIGH.astype(np.int32), KLINE_TOOLS),
            "Kline's island tools, the scientific model (Kline & Boyd 2010)",
        ),
        TextbookModel(
            "kline_gp",
            kline_gp,
            (_kline_distances(), KLINE_POPULATION, KLINE_TOOLS),
            "Kline's island tools, a centred GP over distances (Kline & Boyd 2010)",
        ),
        TextbookModel(
            "cafes", cafes, _cafes(), "cafes, correlated varying effects under LKJ, centred (simulated)"
        ),
        TextbookModel(
            "howell_poly", howell_poly, _howell(), "height on weight, quadratic, 544 people (simulated)"
        ),
        TextbookModel("wines", wines, _wines(), "wine scores, judge and wine effects, 9 x 20 (simulated)"),
        TextbookModel(
            "hurricanes", hurricanes, _hurricanes(), "hurricane deaths, gamma-Poisson, 92 (simulated)"
        ),
    )
}

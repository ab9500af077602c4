"""Ten models from applied fields (sports, pest control, psychometrics, memory, forecasting,
cognitive science, psychophysics, insurance, sparse regression) not in the other sets, written
in the fifty-eighth session as a user would write them in NumPyro, before anything was run on
them. Published data where short (the coal-mining disasters); simulated with this module's own
seed elsewhere.

* ``rugby``: Baio & Blangiardo's (2010) scoring model (PyMC's rugby example): 6 teams, 60
  games, Poisson home and away scores, a home advantage, attack and defence effects made to sum
  to zero by subtracting their means, their scales half-normal.
* ``roaches``: Gelman & Hill's roach counts (the pest-management trial, 262 apartments):
  negative-binomial regression with the trap-days as an exposure, the pre-treatment count, the
  treatment and senior buildings as covariates, many zeros.
* ``irt_3pl``: three-parameter item response (Birnbaum 1968), 200 persons x 15 items, a
  guessing probability per item under ``Beta(5, 17)``, log-normal discriminations.
* ``mpt_1ht``: a latent-trait one-high-threshold recognition model (Klauer 2010), 30
  participants, detection and guessing probabilities per person as probits of a normal
  hierarchy, hits and false alarms binomial.
* ``local_linear_trend``: a local linear trend (Harvey 1989), 80 points, level and slope random
  walks written with cumulative sums, three half-normal scales.
* ``switchpoint``: the coal-mining disasters (Jarrett 1979) with a discrete switchpoint summed
  out by ``logsumexp`` (PyMC's switchpoint example marginalized), two exponential rates.
* ``bandit``: a Q-learning model of a two-armed bandit (Daw 2011), 10 subjects x 120 trials by
  ``lax.scan``, a learning rate under ``Beta(2, 2)`` and an inverse temperature under
  ``Gamma(2, 0.5)`` per subject.
* ``psychometric``: a two-alternative psychometric function with a lapse rate (Wichmann & Hill
  2001), 6 observers x 8 stimulus levels x 40 trials, thresholds in a normal hierarchy, log
  widths, lapse rates under ``Beta(1, 19)``.
* ``loss_curves``: Clark's (2003) growth-curve model of an insurance loss triangle (Stan's
  case study by Gesmann): 10 accident years, 55 cumulative losses, a log-logistic growth in
  development time, the expected loss ratios log-normal around a common one.
* ``bayesian_lasso``: Park & Casella's (2008) Bayesian lasso, 60 x 8: each coefficient normal
  with variance ``sigma^2 tau_j^2``, ``tau_j^2`` exponential, the penalty ``lambda^2`` gamma,
  ``sigma^2`` inverse-gamma.
"""

import numpy as np
from textbook_models import TextbookModel
from unseen_models import COAL_DISASTERS

__all__ = ["APPLIED_MODELS"]

_RNG = np.random.default_rng(58)


def _rugby(teams=6):
    home, away = np.array([(h, a) for h in range(teams) for a in range(teams) if h != a] * 2).T
    attack = _RNG.normal(0.0, 0.2, teams)
    defence = _RNG.normal(0.0, 0.2, teams)
    attack, defence = attack - attack.mean(), defence - defence.mean()
    theta_home = np.exp(2.9 + 0.25 + attack[home] + defence[away])
    theta_away = np.exp(2.9 + attack[away] + defence[home])
    return (
        home.astype(np.int32),
        away.astype(np.int32),
        _RNG.poisson(theta_home).astype(np.float32),
        _RNG.poisson(theta_away).astype(np.float32),
    )


def rugby(home, away, home_points, away_points):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    teams = 6
    home_advantage = numpyro.sample("home", dist.Normal(0.0, 1.0))
    intercept = numpyro.sample("intercept", dist.Normal(3.0, 1.0))
    sd_att = numpyro.sample("sd_att", dist.HalfNormal(1.0))
    sd_def = numpyro.sample("sd_def", dist.HalfNormal(1.0))
    with numpyro.plate("teams", teams):
        atts_star = numpyro.sample("atts_star", dist.Normal(0.0, sd_att))
        defs_star = numpyro.sample("defs_star", dist.Normal(0.0, sd_def))
    atts = atts_star - jnp.mean(atts_star)
    defs = defs_star - jnp.mean(defs_star)
    home_theta = jnp.exp(intercept + home_advantage + atts[home] + defs[away])
    away_theta = jnp.exp(intercept + atts[away] + defs[home])
    with numpyro.plate("games", home.shape[0]):
        numpyro.sample("home_points", dist.Poisson(home_theta), obs=home_points)
        numpyro.sample("away_points", dist.Poisson(away_theta), obs=away_points)


def _roaches(rows=262):
    roach1 = _RNG.gamma(0.4, 100.0, rows)  # pre-treatment counts: skewed, many small
    treatment = (_RNG.uniform(size=rows) < 0.6).astype(np.float64)
    senior = (_RNG.uniform(size=rows) < 0.3).astype(np.float64)
    exposure = _RNG.uniform(0.6, 1.4, rows)
    x = np.stack([np.sqrt(roach1) / 10.0, treatment, senior], 1)
    mean = exposure * np.exp(2.8 + x @ np.array([0.7, -0.6, -0.4]))
    concentration = 0.3
    y = _RNG.poisson(_RNG.gamma(concentration, mean / concentration))
    return x.astype(np.float32), exposure.astype(np.float32), y.astype(np.float32)


def roaches(x, exposure, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    intercept = numpyro.sample("intercept", dist.Normal(0.0, 5.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.5).expand([x.shape[1]]).to_event(1))
    phi = numpyro.sample("phi", dist.Exponential(1.0))
    mean = exposure * jnp.exp(intercept + x @ beta)
    with numpyro.plate("apartments", x.shape[0]):
        numpyro.sample("y", dist.NegativeBinomial2(mean, phi), obs=y)


def _irt_3pl(persons=200, items=15):
    theta = _RNG.normal(size=persons)
    a = np.exp(_RNG.normal(0.0, 0.3, items))
    b = _RNG.normal(0.0, 1.0, items)
    c = _RNG.beta(5.0, 17.0, items)
    p = c + (1 - c) / (1 + np.exp(-a * (theta[:, None] - b)))
    return ((_RNG.uniform(size=(persons, items)) < p).astype(np.float32),)


def irt_3pl(responses):
    import jax
    import numpyro
    import numpyro.distributions as dist

    persons, items = responses.shape
    with numpyro.plate("items", items):
        a = numpyro.sample("a", dist.LogNormal(0.0, 0.5))
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        c = numpyro.sample("c", dist.Beta(5.0, 17.0))
    with numpyro.plate("persons", persons):
        theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    p = c + (1 - c) * jax.nn.sigmoid(a * (theta[:, None] - b))
    with numpyro.plate("persons_", persons, dim=-2), numpyro.plate("items_", items, dim=-1):
        numpyro.sample("y", dist.Bernoulli(probs=p), obs=responses)


def _mpt_1ht(participants=30, trials=50):
    from scipy.stats import norm

    detect = norm.cdf(0.3 + 0.5 * _RNG.normal(size=participants))
    guess = norm.cdf(-0.4 + 0.4 * _RNG.normal(size=participants))
    hits = _RNG.binomial(trials, detect + (1 - detect) * guess)
    false_alarms = _RNG.binomial(trials, guess)
    return np.float32(trials), hits.astype(np.float32), false_alarms.astype(np.float32)


def mpt_1ht(trials, hits, false_alarms):
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.stats import norm

    participants = hits.shape[0]
    mu_d = numpyro.sample("mu_d", dist.Normal(0.0, 1.0))
    mu_g = numpyro.sample("mu_g", dist.Normal(0.0, 1.0))
    sigma_d = numpyro.sample("sigma_d", dist.HalfNormal(1.0))
    sigma_g = numpyro.sample("sigma_g", dist.HalfNormal(1.0))
    with numpyro.plate("participants", participants):
        z_d = numpyro.sample("z_d", dist.Normal(0.0, 1.0))
        z_g = numpyro.sample("z_g", dist.Normal(0.0, 1.0))
        detect = norm.cdf(mu_d + sigma_d * z_d)
        guess = norm.cdf(mu_g + sigma_g * z_g)
        numpyro.sample("hits", dist.Binomial(trials, probs=detect + (1 - detect) * guess), obs=hits)
        numpyro.sample("false_alarms", dist.Binomial(trials, probs=guess), obs=false_alarms)


def _local_linear_trend(points=80):
    slope = 0.1 + np.cumsum(_RNG.normal(0.0, 0.05, points))
    level = np.cumsum(slope + _RNG.normal(0.0, 0.3, points))
    return (level + _RNG.normal(0.0, 0.5, points)).astype(np.float32), np.float32(0.0)


def local_linear_trend(y, start):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    points = y.shape[0]
    sigma_level = numpyro.sample("sigma_level", dist.HalfNormal(1.0))
    sigma_slope = numpyro.sample("sigma_slope", dist.HalfNormal(0.5))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))
    level0 = numpyro.sample("level0", dist.Normal(start, 5.0))
    slope = numpyro.sample("slope", dist.GaussianRandomWalk(sigma_slope, num_steps=points))
    with numpyro.plate("time", points):
        shock = numpyro.sample("shock", dist.Normal(0.0, sigma_level))
    level = level0 + jnp.cumsum(slope + shock)
    numpyro.sample("y", dist.Normal(level, sigma_obs).to_event(1), obs=y)


def switchpoint(disasters):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    years = disasters.shape[0]
    early = numpyro.sample("early_rate", dist.Exponential(1.0))
    late = numpyro.sample("late_rate", dist.Exponential(1.0))
    log_early = dist.Poisson(early).log_prob(disasters)
    log_late = dist.Poisson(late).log_prob(disasters)
    # the switchpoint tau in 0..years-1, uniform: years before tau early, from tau on late
    before = jnp.concatenate([jnp.zeros(1), jnp.cumsum(log_early)[:-1]])
    after = jnp.cumsum(log_late[::-1])[::-1]
    numpyro.factor("switchpoint", logsumexp(before + after) - jnp.log(years))


def _bandit(subjects=10, trials=120):
    alpha = _RNG.beta(4.0, 6.0, subjects)
    beta = _RNG.gamma(6.0, 0.6, subjects)
    reward_p = np.array([0.3, 0.7])
    q = np.zeros((subjects, 2))
    choices = np.zeros((trials, subjects), np.int32)
    rewards = np.zeros((trials, subjects), np.float32)
    for t in range(trials):
        if t == 60:
            reward_p = reward_p[::-1].copy()  # a reversal half-way
        logits = beta[:, None] * q
        p1 = 1 / (1 + np.exp(logits[:, 0] - logits[:, 1]))
        choice = (_RNG.uniform(size=subjects) < p1).astype(np.int32)
        reward = (_RNG.uniform(size=subjects) < reward_p[choice]).astype(np.float64)
        q[np.arange(subjects), choice] += alpha * (reward - q[np.arange(subjects), choice])
        choices[t], rewards[t] = choice, reward
    return choices, rewards


def bandit(choices, rewards):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    trials, subjects = choices.shape
    with numpyro.plate("subjects", subjects):
        alpha = numpyro.sample("alpha", dist.Beta(2.0, 2.0))
        beta = numpyro.sample("beta", dist.Gamma(2.0, 0.5))

    def step(q, trial):
        choice, reward = trial
        log_p = jax.nn.log_softmax(beta[:, None] * q, axis=-1)
        chosen = jax.nn.one_hot(choice, 2)
        log_lik = jnp.sum(log_p * chosen, -1)
        q = q + chosen * (alpha * (reward - jnp.sum(q * chosen, -1)))[:, None]
        return q, log_lik

    _, log_lik = jax.lax.scan(step, jnp.zeros((subjects, 2)), (choices, rewards))
    numpyro.factor("choices", jnp.sum(log_lik))


def _psychometric(observers=6, trials=40):
    levels = np.linspace(-2.0, 2.0, 8)
    threshold = 0.2 + 0.4 * _RNG.normal(size=observers)
    width = np.exp(np.log(0.5) + 0.2 * _RNG.normal(size=observers))
    lapse = _RNG.beta(1.0, 19.0, observers)
    p = 0.5 + (0.5 - lapse[:, None]) / (1 + np.exp(-(levels - threshold[:, None]) / width[:, None]))
    correct = _RNG.binomial(trials, p)
    return levels.astype(np.float32), np.float32(trials), correct.astype(np.float32)


def psychometric(levels, trials, correct):
    import jax
    import numpyro
    import numpyro.distributions as dist

    observers = correct.shape[0]
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("observers", observers):
        threshold = numpyro.sample("threshold", dist.Normal(mu, tau))
        log_width = numpyro.sample("log_width", dist.Normal(0.0, 1.0))
        lapse = numpyro.sample("lapse", dist.Beta(1.0, 19.0))
    curve = jax.nn.sigmoid((levels - threshold[:, None]) / jax.numpy.exp(log_width)[:, None])
    p = 0.5 + (0.5 - lapse[:, None]) * curve
    numpyro.sample("correct", dist.Binomial(trials, probs=p).to_event(2), obs=correct)


def _loss_curves(years=10):
    premium = 10_000.0 * (1 + 0.05 * np.arange(years))
    elr = np.exp(np.log(0.65) + 0.1 * _RNG.normal(size=years))
    omega, theta = 1.4, 2.5
    origin, dev = np.array([(i, d) for i in range(years) for d in range(1, years - i + 1)]).T
    t = dev.astype(np.float64)
    growth = t**omega / (t**omega + theta**omega)
    mean = premium[origin] * elr[origin] * growth
    loss = mean + _RNG.normal(size=mean.size) * 0.05 * np.sqrt(premium[origin] * mean)
    return (
        premium.astype(np.float32),
        origin.astype(np.int32),
        t.astype(np.float32),
        (loss / 1000.0).astype(np.float32),
    )


def loss_curves(premium, origin, dev, loss):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    years = premium.shape[0]
    mu_elr = numpyro.sample("mu_elr", dist.Normal(jnp.log(0.6), 0.5))
    sigma_elr = numpyro.sample("sigma_elr", dist.HalfNormal(0.3))
    omega = numpyro.sample("omega", dist.LogNormal(0.0, 0.5))
    theta = numpyro.sample("theta", dist.LogNormal(1.0, 0.5))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("years", years):
        elr = numpyro.sample("elr", dist.LogNormal(mu_elr, sigma_elr))
    growth = dev**omega / (dev**omega + theta**omega)
    mean = premium[origin] / 1000.0 * elr[origin] * growth
    numpyro.sample("loss", dist.Normal(mean, sigma * jnp.sqrt(mean)).to_event(1), obs=loss)


def _bayesian_lasso(rows=60, features=8):
    x = _RNG.normal(size=(rows, features))
    beta = np.array([3.0, -2.0, 1.5, 0.0, 0.0, 0.0, 0.0, 0.5])
    y = x @ beta + _RNG.normal(0.0, 1.5, rows)
    return x.astype(np.float32), (y - y.mean()).astype(np.float32)


def bayesian_lasso(x, y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    features = x.shape[1]
    sigma2 = numpyro.sample("sigma2", dist.InverseGamma(1.0, 1.0))
    lambda2 = numpyro.sample("lambda2", dist.Gamma(1.0, 0.1))
    with numpyro.plate("features", features):
        tau2 = numpyro.sample("tau2", dist.Exponential(lambda2 / 2))
        beta = numpyro.sample("beta", dist.Normal(0.0, jnp.sqrt(sigma2 * tau2)))
    numpyro.sample("y", dist.Normal(x @ beta, jnp.sqrt(sigma2)).to_event(1), obs=y)


APPLIED_MODELS = {
    entry.name: entry
    for entry in (
        TextbookModel(
            "rugby", rugby, _rugby(), "Six Nations-style scoring, attack and defence (simulated, 60 games)"
        ),
        TextbookModel(
            "roaches", roaches, _roaches(), "negative-binomial roach counts with exposure (simulated, 262)"
        ),
        TextbookModel(
            "irt_3pl", irt_3pl, _irt_3pl(), "3PL item response with guessing, 200 x 15 (simulated)"
        ),
        TextbookModel(
            "mpt_1ht", mpt_1ht, _mpt_1ht(), "latent-trait one-high-threshold MPT, 30 people (simulated)"
        ),
        TextbookModel(
            "local_linear_trend",
            local_linear_trend,
            _local_linear_trend(),
            "local linear trend, level and slope walks, 80 points (simulated)",
        ),
        TextbookModel(
            "switchpoint",
            switchpoint,
            (COAL_DISASTERS.astype(np.float32),),
            "coal disasters, switchpoint summed out",
        ),
        TextbookModel(
            "bandit", bandit, _bandit(), "Q-learning two-armed bandit, 10 x 120 trials (simulated)"
        ),
        TextbookModel(
            "psychometric",
            psychometric,
            _psychometric(),
            "2AFC psychometric functions with lapses, 6 x 8 (simulated)",
        ),
        TextbookModel(
            "loss_curves", loss_curves, _loss_curves(), "log-logistic loss development, 55 cells (simulated)"
        ),
        TextbookModel(
            "bayesian_lasso",
            bayesian_lasso,
            _bayesian_lasso(),
            "Park-Casella Bayesian lasso, 60 x 8 (simulated)",
        ),
    )
}

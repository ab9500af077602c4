"""Latents of one family stacked into one array for the step (grepvi.inference.stacking).

The stacked target is the same model: its log joint and local log joints at the stacked
draws are the model's at its own, and one G-REP draw's gradient is the same numbers in the
other layout. A default fit of a model written with scalar latents runs on the stacked ones
and answers by the model's names: the exact posterior's moments, its initial parameters as
given, resumed bit for bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import gammaln

import grepvi
from grepvi.errors import ModelError
from grepvi.estimators.base import sample_standardized
from grepvi.estimators.grep import grep_surrogate
from grepvi.families import Beta, Dirichlet, Gamma, Normal
from grepvi.families.transformed import Affine
from grepvi.inference import stacking
from grepvi.inference.state import initial_params, make_target, nonfinite_latents
from grepvi.target import latent_names

# three gamma-Poisson rates (one of them a vector of 2), a beta-Bernoulli probability pair and
# a normal mean: the exact posteriors are known
COUNTS = {"a": (3.0, 5.0, 4.0), "b": (0.0, 1.0), "c": ((7.0, 9.0), (2.0, 1.0))}
PRIOR_SHAPE, PRIOR_RATE = 0.5, 0.3
FLIPS = {"p": (1.0, 0.0, 1.0, 1.0), "q": (0.0, 0.0, 1.0)}
NORMAL_DATA = (1.2, 0.4, 2.0)  # y ~ N(mu, 1), mu ~ N(0, 1)


def _families():
    return {
        "a": Gamma(),
        "b": Gamma(),
        "c": Gamma(shape=(2,)),
        "p": Beta(),
        "q": Beta(),
        "mu": Normal(),
    }


def _local(z):
    out = {}
    for name, counts in COUNTS.items():
        counts = jnp.asarray(counts, jnp.float32)
        rate, n = z[name], counts.shape[0]
        out[name] = (PRIOR_SHAPE - 1.0 + counts.sum(0)) * jnp.log(rate) - (PRIOR_RATE + n) * rate
    for name, flips in FLIPS.items():
        flips = jnp.asarray(flips, jnp.float32)
        heads, n = flips.sum(), flips.shape[0]
        out[name] = heads * jnp.log(z[name]) + (n - heads) * jnp.log1p(-z[name])
    data = jnp.asarray(NORMAL_DATA, jnp.float32)
    out["mu"] = -0.5 * z["mu"] ** 2 - 0.5 * jnp.sum((data - z["mu"]) ** 2)
    return out


def _logdensity(z):
    return sum(jnp.sum(value) for value in _local(z).values())


def _exact_moments():
    """Each latent's exact posterior mean and variance (float64)."""
    moments = {}
    for name, counts in COUNTS.items():
        counts = np.asarray(counts, np.float64)
        shape, rate = PRIOR_SHAPE + counts.sum(0), PRIOR_RATE + counts.shape[0]
        moments[name] = (shape / rate, shape / rate**2)
    for name, flips in FLIPS.items():
        a, b = 1.0 + sum(flips), 1.0 + len(flips) - sum(flips)
        moments[name] = (a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1.0)))
    precision = 1.0 + len(NORMAL_DATA)
    moments["mu"] = (sum(NORMAL_DATA) / precision, 1.0 / precision)
    return moments


def test_the_plan_stacks_latents_of_one_type_with_equal_options_only():
    families = {
        **_families(),
        "d": Gamma(min_concentration=1e-3),  # other options: alone
        "e": Dirichlet(shape=(3,)),  # an event axis: rows of one event size stack
        "f": Dirichlet(shape=(2, 3)),
        "h": Dirichlet(shape=(4,)),  # another event size: alone
    }
    plan = stacking.plan(families)
    assert set(plan.groups) == {"a+b+c", "p+q", "e+f"}
    rows, family = plan.groups["e+f"]
    assert family == Dirichlet(shape=(3, 3))
    assert [(m.name, m.shape, m.start, m.size) for m in rows] == [("e", (3,), 0, 1), ("f", (2, 3), 1, 2)]
    members, family = plan.groups["a+b+c"]
    assert [(m.name, m.shape, m.start, m.size) for m in members] == [
        ("a", (), 0, 1),
        ("b", (), 1, 1),
        ("c", (2,), 2, 2),
    ]
    assert family == Gamma(shape=(4,))
    assert set(plan.stacked_families) == {"a+b+c", "p+q", "mu", "d", "e+f", "h"}
    assert stacking.plan({"a": Gamma(), "b": Beta(), "mu": Normal()}) is None  # nothing to stack
    # a stacked name never takes a latent's
    assert set(stacking.plan({"a": Gamma(), "b": Gamma(), "a+b": Normal()}).groups) == {"_a+b"}


def test_stack_and_unstack_are_inverse_on_parameter_trees():
    families = _families()
    plan = stacking.plan(families)
    keys = jax.random.split(jax.random.key(0), len(families))
    params = {
        name: jax.tree_util.tree_map(
            lambda leaf, k=key: jax.random.normal(k, leaf.shape), family.init_params()
        )
        for key, (name, family) in zip(keys, sorted(families.items()), strict=True)
    }
    tree = {"params": params, "moments": (params, {"other": jnp.ones(3)})}
    stacked = plan.stack(tree)
    assert set(stacked["params"]) == {"a+b+c", "p+q", "mu"}
    assert stacked["params"]["a+b+c"]["mean"].shape == (4,)
    np.testing.assert_array_equal(stacked["params"]["a+b+c"]["mean"][2:], params["c"]["mean"])
    back = plan.unstack(stacked)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(tree)
    for x, y in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree), strict=True):
        np.testing.assert_array_equal(x, y)
    # sliced on the host (the fit's result): the same numbers, NumPy pieces
    on_host = plan.unstack(stacked, on_host=True)
    assert jax.tree_util.tree_structure(on_host) == jax.tree_util.tree_structure(tree)
    assert isinstance(on_host["params"]["c"]["mean"], np.ndarray)
    for x, y in zip(jax.tree_util.tree_leaves(on_host), jax.tree_util.tree_leaves(tree), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_fits_result_is_unstacked_on_the_host_as_by_a_program():
    """``fitting._unstacked`` (slices on the host, put back on the device) gives the compiled
    ``unstack``'s arrays bit for bit, dtypes and shapes included, keys left as keys."""
    from grepvi.inference.fitting import _unstacked

    families = _families()
    plan = stacking.plan(families)
    params = {name: family.init_params() for name, family in families.items()}
    stacked = plan.stack({"params": params, "key": jax.random.key(3), "count": jnp.int32(7)})
    stacked["params"] = jax.tree_util.tree_map(lambda x: x + 0.25, stacked["params"])
    by_program = jax.jit(plan.unstack)(stacked)
    by_host = _unstacked(plan, stacked)
    assert jax.tree_util.tree_structure(by_host) == jax.tree_util.tree_structure(by_program)
    for x, y in zip(jax.tree_util.tree_leaves(by_host), jax.tree_util.tree_leaves(by_program), strict=True):
        assert isinstance(x, jax.Array) and x.dtype == y.dtype and x.shape == y.shape
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(x), jax.random.key_data(y))
        else:
            np.testing.assert_array_equal(x, y)


def test_the_stacked_target_is_the_model_and_its_grep_gradient_the_same_numbers():
    """At one standardized draw (the same numbers in both layouts) the stacked target's log
    joint, local log joints and G-REP surrogate's value and gradient are the model's."""
    families = _families()
    target = make_target(_logdensity, families, _local)
    plan = stacking.plan(families)
    stacked = plan.target(target)
    params = {name: family.init_params() for name, family in families.items()}
    params = jax.tree_util.tree_map(lambda x: x + 0.3, params)
    eps = sample_standardized(jax.random.key(1), params, families)

    @jax.jit
    def both(params, eps):
        own = jax.value_and_grad(grep_surrogate, has_aux=True)(params, eps, target)
        other = jax.value_and_grad(grep_surrogate, has_aux=True)(plan.stack(params), plan.stack(eps), stacked)
        z = {name: family.mean(params[name]) for name, family in families.items()}
        locals_ = (target.local_logdensity_fn(z), stacked.local_logdensity_fn(plan.stack(z)))
        return own, other, locals_

    (own_value, own_grad), (value, grad), (own_local, local) = both(params, eps)
    np.testing.assert_allclose(value[0], own_value[0], rtol=1e-6)
    np.testing.assert_allclose(value[1], own_value[1], rtol=1e-6)
    for x, y in zip(
        jax.tree_util.tree_leaves(plan.unstack(grad)), jax.tree_util.tree_leaves(own_grad), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    for name in families:
        np.testing.assert_allclose(plan.unstack(local)[name], own_local[name], rtol=1e-6)


def test_a_default_fit_of_scalar_latents_runs_stacked_and_answers_by_name():
    """The defaults on the model above: the run's state holds one latent per family, the
    answer one per latent of the model, each at its exact posterior's mean and variance
    within the accuracy the fit reports (its posterior standard deviations)."""
    result = grepvi.fit(_logdensity, _families(), local_logdensity_fn=_local, progress=False)
    assert result.converged
    assert set(result.run_state.loop.params) == {"a+b+c", "p+q", "mu"}
    assert set(result.params) == set(result.posterior) == set(_families())
    assert result.families == _families()
    tolerance = 4 * result.convergence.accuracy + 0.02
    for name, (mean, variance) in _exact_moments().items():
        posterior = result.posterior[name]
        assert np.shape(posterior.mean()) == np.shape(mean), name
        error = np.abs(np.asarray(posterior.mean(), np.float64) - mean) / np.sqrt(variance)
        assert np.all(error < tolerance), (name, error, tolerance)
        ratio = np.asarray(posterior.variance(), np.float64) / variance
        assert np.all(np.abs(ratio - 1.0) < 0.1), (name, ratio)
    # the last optimizer state in the model's layout too
    assert set(result.state.params) == set(_families())


def test_init_params_by_the_models_names_reach_the_stacked_run():
    """A step too small to change a float32 parameter (``step_size=1e-30``, the default rule's
    fixed schedule: the stacked layout; a user's ``optimizer`` keeps the model's own) leaves the
    parameters where ``init_params`` put them, latent by latent."""
    families = _families()
    init = {
        name: jax.tree_util.tree_map(lambda x, i=i: x + 0.1 * (i + 1), family.init_params())
        for i, (name, family) in enumerate(sorted(families.items()))
    }
    result = grepvi.fit(_logdensity, families, step_size=1e-30, num_steps=3, init_params=init, progress=False)
    assert sorted(result.run_state.loop.params) == ["a+b+c", "mu", "p+q"]  # the run was stacked
    for name in families:
        for key in init[name]:
            np.testing.assert_array_equal(result.params[name][key], init[name][key])
    with pytest.raises(ModelError, match=r"init_params has no entry for latents \['q'\]"):
        grepvi.fit(
            _logdensity,
            families,
            num_steps=3,
            init_params={n: v for n, v in init.items() if n != "q"},
            progress=False,
        )


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_a_stacked_fit_resumed_is_bitwise_the_uninterrupted_one():
    """Stopped after its trial's windows (its run state in the stacked layout), resumed."""
    calls = [0]

    def stop_after_eight(event):
        calls[0] += 1
        return calls[0] >= 8

    kwargs = dict(local_logdensity_fn=_local, progress=False, num_steps=2000)
    full = grepvi.fit(_logdensity, _families(), **kwargs)
    part = grepvi.fit(_logdensity, _families(), callback=stop_after_eight, **kwargs)
    assert part.convergence.reason == "interrupted"
    rest = grepvi.fit(_logdensity, _families(), resume=part.run_state, **kwargs)
    leaves = jax.tree_util.tree_leaves
    for x, y in zip(leaves(rest.params), leaves(full.params), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.concatenate([part.trace.elbo, rest.trace.elbo]), full.trace.elbo)


def test_a_model_error_names_the_models_own_latent():
    def broken(z):
        return jnp.sum(z["a"]) + z["b"] @ jnp.ones(3)  # b is a scalar

    with pytest.raises(ModelError, match="logdensity_fn failed on latents of shapes"):
        grepvi.fit(broken, {"a": Gamma(), "b": Gamma()}, progress=False)

    def local(z):
        return {"a": jnp.log(z["a"]) - z["a"]}  # no entry for b

    def full(z):
        return jnp.sum(local(z)["a"]) + gammaln(z["b"])

    with pytest.raises(ModelError, match="no entry for latent 'b'"):
        grepvi.fit(full, {"a": Gamma(), "b": Gamma()}, local_logdensity_fn=local, progress=False)


def test_the_step_flags_a_non_finite_gradient_per_member_of_a_stacked_latent():
    stacked = stacking.plan(_families())
    target = stacked.target(make_target(_logdensity, _families()))
    names = latent_names(target)
    assert sorted(names) == sorted(_families())  # the model's names, none stacked
    params = stacked.stack(initial_params(jax.random.key(0), _families()))
    zeros = stacked.unstack(jax.tree_util.tree_map(jnp.zeros_like, params))
    for bad in _families():
        poisoned = jax.tree_util.tree_map(
            lambda leaf: leaf.reshape(-1).at[-1].set(jnp.nan).reshape(leaf.shape), zeros[bad]
        )
        grad = stacked.stack({**zeros, bad: poisoned})
        flags = np.asarray(jax.jit(lambda g: nonfinite_latents(g, target))(grad))
        assert [n for n, flag in zip(names, flags, strict=True) if flag] == [bad]


@jax.custom_jvp
def _nan_slope(x):
    """0, with a NaN derivative: a finite value whose gradient nothing mends (the widened
    gradient's zero products take a where-branch's ``nan * 0`` as 0; this is ``nan * 1``)."""
    return jnp.zeros_like(x)


@_nan_slope.defjvp
def _nan_slope_jvp(primals, tangents):
    return _nan_slope(primals[0]), jnp.nan * tangents[0]


def test_a_stalled_stacked_fit_names_the_members_latent_not_the_stack():
    def logdensity(z):
        # finite value, a NaN gradient in b only
        b_term = _nan_slope(z["b"])
        return jnp.sum(jnp.log(z["a"]) - z["a"]) - z["b"] + b_term + jnp.log(z["c"]) - z["c"]

    families = {"a": Gamma(), "b": Gamma(), "c": Gamma()}
    assert stacking.plan(families).groups  # the three are one stacked latent
    with pytest.warns(grepvi.errors.NonFiniteStepWarning, match=r"\['b'\]"):
        with pytest.raises(grepvi.errors.NumericalError, match=r"for latent\(s\) \['b'\]"):
            grepvi.fit(logdensity, families, progress=False)


def _assert_the_stacked_surrogate_is_the_models(plan, target, stacked, params, eps):
    """At one standardized draw: the stacked target's G-REP surrogate value and gradient
    (unstacked) are the model's."""
    own_value, own_grad = jax.value_and_grad(grep_surrogate, has_aux=True)(params, eps, target)
    value, grad = jax.value_and_grad(grep_surrogate, has_aux=True)(
        plan.stack(params), plan.stack(eps), stacked
    )
    np.testing.assert_allclose(value[0], own_value[0], rtol=1e-6)
    for x, y in zip(
        jax.tree_util.tree_leaves(plan.unstack(grad)), jax.tree_util.tree_leaves(own_grad), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _uniform_families():
    """Four ``Uniform`` priors of a BUGS model (Affine betas on their own intervals), a
    reflected shifted gamma (``c - Gamma``, an interval of another kind) and a gamma."""
    return {
        "u": Affine(base=Beta(), loc=-2.0, scale=4.0),
        "v": Affine(base=Beta(shape=(2,)), loc=0.5, scale=np.asarray([0.5, 2.0])),
        "w": Affine(base=Beta(), loc=0.0, scale=1.0),
        "x": Affine(base=Gamma(), loc=1.0, scale=1.0),  # (1, inf)
        "y": Affine(base=Gamma(), loc=3.0, scale=-1.0),  # (-inf, 3): another support kind
        "g": Gamma(),
    }


def test_affine_latents_on_different_intervals_stack_with_each_elements_bounds():
    plan = stacking.plan(_uniform_families())
    assert set(plan.groups) == {"u+v+w"}
    members, family = plan.groups["u+v+w"]
    assert isinstance(family, Affine) and family.base == Beta(shape=(4,))
    np.testing.assert_array_equal(family.loc, [-2.0, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(family.scale, [4.0, 0.5, 2.0, 1.0])
    assert set(plan.stacked_families) == {"u+v+w", "x", "y", "g"}
    # a positive base stacks where the support's kind is one
    both = stacking.plan({"x": Affine(base=Gamma(), loc=1.0), "z": Affine(base=Gamma(), loc=-4.0, scale=2.0)})
    assert set(both.groups) == {"x+z"}


def test_the_stacked_affine_target_is_the_model_and_its_grep_gradient_the_same_numbers():
    families = _uniform_families()
    bounds = {"u": (-2.0, 2.0), "w": (0.0, 1.0)}

    def logdensity(z):  # a likelihood that reads every latent's value
        inside = sum(jnp.sum(jnp.log(z[n] - lo) + jnp.log(hi - z[n])) for n, (lo, hi) in bounds.items())
        return inside + jnp.sum(jnp.sin(z["v"])) - z["x"] + z["y"] - z["g"]

    target = make_target(logdensity, families, log_space=True)
    plan = stacking.plan(families)
    stacked = plan.target(target)
    params = jax.tree_util.tree_map(lambda x: x + 0.3, {n: f.init_params() for n, f in families.items()})
    eps = sample_standardized(jax.random.key(1), params, families)
    _assert_the_stacked_surrogate_is_the_models(plan, target, stacked, params, eps)


# two Dirichlet-multinomial rows as separate sites and one of two rows: Dirichlet(1) priors
DIRICHLET_COUNTS = {"r": (3.0, 0.0, 5.0), "s": ((1.0, 4.0, 2.0), (0.0, 0.0, 9.0))}


def _dirichlet_local(z):
    return {
        name: jnp.sum(jnp.asarray(counts, jnp.float32) * z[name], -1)  # log space: log z
        for name, counts in DIRICHLET_COUNTS.items()
    }


def _dirichlet_logdensity(z):
    return sum(jnp.sum(v) for v in _dirichlet_local(z).values())


def _dirichlet_families():
    return {"r": Dirichlet(shape=(3,)), "s": Dirichlet(shape=(2, 3))}


def test_dirichlet_rows_stack_and_the_stacked_target_is_the_model():
    families = _dirichlet_families()
    target = make_target(_dirichlet_logdensity, families, _dirichlet_local, log_space=True)
    plan = stacking.plan(families)
    assert set(plan.groups) == {"r+s"}
    stacked = plan.target(target)
    params = jax.tree_util.tree_map(lambda x: x + 0.3, {n: f.init_params() for n, f in families.items()})
    params["s"]["concentration"] = params["s"]["concentration"] * jnp.asarray([[1.0], [2.0]])
    eps = sample_standardized(jax.random.key(1), params, families)
    back = plan.unstack(plan.stack({"params": params, "eps": eps}))
    for x, y in zip(
        jax.tree_util.tree_leaves(back),
        jax.tree_util.tree_leaves({"params": params, "eps": eps}),
        strict=True,
    ):
        np.testing.assert_array_equal(x, y)
    _assert_the_stacked_surrogate_is_the_models(plan, target, stacked, params, eps)


def test_a_default_fit_of_dirichlet_rows_runs_stacked_at_the_exact_posterior():
    """Conjugate: each row's posterior is Dirichlet(1 + counts); the stacked run's answer is
    its mean within the accuracy the fit reports."""
    result = grepvi.fit(
        _dirichlet_logdensity,
        _dirichlet_families(),
        local_logdensity_fn=_dirichlet_local,
        progress=False,
        log_space=True,
    )
    assert result.converged
    assert set(result.run_state.loop.params) == {"r+s"}
    for name, counts in DIRICHLET_COUNTS.items():
        alpha = 1.0 + np.asarray(counts, np.float64)
        total = alpha.sum(-1, keepdims=True)
        mean, sd = alpha / total, np.sqrt(alpha * (total - alpha) / (total**2 * (total + 1)))
        error = np.abs(np.asarray(result.posterior[name].mean(), np.float64) - mean) / sd
        assert error.shape == mean.shape and np.all(error < 4 * result.convergence.accuracy + 0.02), error


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_a_fit_with_stacked_dirichlet_rows_and_affines_resumes_bitwise():
    """The rows' and the per-element bounds' layouts through a stop and a resume."""
    families = {
        **_dirichlet_families(),
        "u": Affine(base=Beta(), loc=-1.0, scale=2.0),
        "w": Affine(base=Beta(shape=(2,)), loc=0.0, scale=np.asarray([1.0, 3.0])),
    }

    def logdensity(z):
        bounded = -2.0 * z["u"] ** 2 + jnp.sum(jnp.sin(z["w"]))  # smooth to the bounds
        return _dirichlet_logdensity(z) + bounded

    assert set(stacking.plan(families).groups) == {"r+s", "u+w"}
    calls = [0]

    def stop_after_eight(event):
        calls[0] += 1
        return calls[0] >= 8

    kwargs = dict(progress=False, num_steps=2000, log_space=True)
    full = grepvi.fit(logdensity, families, **kwargs)
    part = grepvi.fit(logdensity, families, callback=stop_after_eight, **kwargs)
    assert part.convergence.reason == "interrupted"
    rest = grepvi.fit(logdensity, families, resume=part.run_state, **kwargs)
    leaves = jax.tree_util.tree_leaves
    for x, y in zip(leaves(rest.params), leaves(full.params), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.concatenate([part.trace.elbo, rest.trace.elbo]), full.trace.elbo)

"""XLA's backend extra options set for one compilation (:mod:`grepvi.inference.xla_extra_options`),
and the step options that use them (a model's ``scan`` compiled as one kernel a loop)."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grepvi.inference import compilation_cache, xla_extra_options
from grepvi.inference.xla_extra_options import EXTRA_OPTIONS_KEY, extra_options, parse_entries
from grepvi.testing import assert_resumed_bitwise

THRESHOLD = "xla_cpu_small_while_loop_byte_threshold"


def _loop(x):
    """A 100-trip loop over 64 floats: 1 kB and more accessed a trip (XLA's default bound)."""

    def body(i, y):
        return jnp.sin(y) * 1.01 + jnp.cos(y[::-1]) * 0.5

    return jax.lax.fori_loop(0, 100, body, x)


def _ar1_logdensity(z, series):
    """An AR(1) log density by ``lax.scan`` (a model's recursion over time)."""
    phi, sigma = z["phi"], z["sigma"]

    def step(previous, value):
        return value, -0.5 * ((value - phi * previous) / sigma) ** 2 - jnp.log(sigma)

    _, terms = jax.lax.scan(step, series[0], series[1:])
    return jnp.sum(terms) - 0.5 * phi**2 - sigma


def _small_calls(compiled) -> int:
    return compiled.as_text().count("xla_cpu_small_call")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an option of XLA's CPU backend")
def test_a_loop_is_emitted_as_one_kernel_only_where_asked():
    """The option reaches XLA (the loop hoisted into a ``small_call``) in this compilation only:
    the same program compiled without it, or at a bound of 0, keeps its loop; the values agree."""
    x = jnp.linspace(-1.0, 1.0, 64)
    lowered = jax.jit(_loop).lower(x)
    hoisted = lowered.compile({**extra_options({THRESHOLD: "1000000"})})
    assert _small_calls(hoisted) >= 1
    plain = lowered.compile()
    assert _small_calls(plain) == 0
    assert _small_calls(lowered.compile(extra_options({THRESHOLD: "0"}))) == 0
    np.testing.assert_allclose(np.asarray(hoisted(x)), np.asarray(plain(x)), rtol=1e-6, atol=1e-6)
    assert _small_calls(jax.jit(_loop).lower(x).compile()) == 0  # the wrapper leaves others alone


def test_the_options_bytes_merge_into_compile_options():
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas = 3
    merged = xla_extra_options.with_extra_options(options, {"name_a": "1", "name_b": "two"})
    serialized = merged.SerializeAsString()
    assert b"name_a" in serialized and b"two" in serialized
    assert merged.num_replicas == 3  # the rest of the options kept
    # JAX's persistent-cache key hashes a deep copy's serialization: the entries are in it
    assert b"name_a" in copy.deepcopy(merged).SerializeAsString()
    assert xla_extra_options.with_extra_options(options, {}) is options
    # the varint of a length past 127 (a long value): two bytes, and still parsed
    long = xla_extra_options.with_extra_options(options, {"name_c": "9" * 300})
    assert b"9" * 300 in long.SerializeAsString()


def test_entries_are_parsed_and_bad_ones_named():
    assert parse_entries("a=1, b=x ,") == {"a": "1", "b": "x"}
    assert parse_entries("") == {}
    with pytest.raises(ValueError, match=EXTRA_OPTIONS_KEY):
        parse_entries("a=1,b")


def test_extra_options_are_left_out_where_jax_does_not_allow_them(monkeypatch):
    monkeypatch.setattr(xla_extra_options, "_installed", False)
    assert extra_options({THRESHOLD: "1"}) == {}
    assert compilation_cache.step_compiler_options(10, "cpu", scan_trips=100) == (
        compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    )


def test_a_step_with_a_long_scan_compiles_its_loops_as_kernels():
    options = compilation_cache.step_compiler_options
    trips = compilation_cache.SMALL_LOOP_MIN_TRIPS
    bound = {EXTRA_OPTIONS_KEY: f"{THRESHOLD}={compilation_cache.SMALL_LOOP_BYTES}"}
    assert options(10, "cpu", scan_trips=trips) == {**compilation_cache.SMALL_MODEL_COMPILER_OPTIONS, **bound}
    assert options(10, "cpu", scan_trips=trips - 1) == compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    data_bound = options(10, "cpu", flops=compilation_cache.DATA_BOUND_FLOPS, scan_trips=trips)
    assert data_bound == {**compilation_cache.DATA_BOUND_COMPILER_OPTIONS, **bound}
    assert options(10**6, "cpu", scan_trips=trips) == compilation_cache.LARGE_MODEL_COMPILER_OPTIONS
    assert options(10, "gpu", scan_trips=trips) == {}


def test_the_default_window_of_a_recursive_model_hoists_its_loops(monkeypatch):
    """An AR(1) log density by ``lax.scan`` over 60 points: the profile finds the scan, the
    window's options carry the bound; a model without one keeps the small-model options."""
    from test_compilation_cache import _window_options

    import grepvi
    from grepvi.inference import fitting

    series = jnp.asarray(np.random.default_rng(0).normal(size=60).cumsum() * 0.3, jnp.float32)
    ar1 = _ar1_logdensity

    latents = {"phi": grepvi.Normal(), "sigma": grepvi.Gamma()}
    options = _window_options(monkeypatch, ar1, latents, series)
    assert options[EXTRA_OPTIONS_KEY] == f"{THRESHOLD}={compilation_cache.SMALL_LOOP_BYTES}"
    jaxpr = jax.make_jaxpr(lambda d: ar1({"phi": 0.5, "sigma": 1.0}, d))(series)
    assert fitting.step_profile(jaxpr)["scan_trips"] == 59

    def iid(z, data):
        return jnp.sum(-0.5 * ((data - z["phi"]) / z["sigma"]) ** 2 - jnp.log(z["sigma"])) - z["sigma"]

    assert EXTRA_OPTIONS_KEY not in _window_options(monkeypatch, iid, latents, series)


def test_a_recursive_model_resumed_is_bitwise_the_uninterrupted_fit(monkeypatch):
    """The default procedure on an AR(1) by ``lax.scan`` (its window compiled with the loop
    bound): stopped after 12 windows and resumed from its run state, bitwise the whole run."""
    import grepvi
    from grepvi.inference import driver

    seen = []
    make_window = driver.make_window

    def recording(step_fn, length, *args, **kwargs):
        seen.append(kwargs.get("compiler_options") or {})
        return make_window(step_fn, length, *args, **kwargs)

    monkeypatch.setattr(driver, "make_window", recording)
    series = jnp.asarray(np.random.default_rng(1).normal(size=40).cumsum() * 0.3, jnp.float32)

    def ar1(z):
        return _ar1_logdensity(z, series)

    latents = {"phi": grepvi.Normal(), "sigma": grepvi.Gamma()}
    calls = [0]

    def stop_early(event):
        calls[0] += 1
        return calls[0] >= 12

    full = grepvi.fit(ar1, latents, progress=False)
    assert any(EXTRA_OPTIONS_KEY in options for options in seen)
    part = grepvi.fit(ar1, latents, progress=False, callback=stop_early)
    assert part.convergence.reason == "interrupted"
    rest = grepvi.fit(ar1, latents, progress=False, resume=part.run_state)
    assert full.convergence.converged
    assert_resumed_bitwise(full, part, rest)


def test_a_jax_whose_compile_options_refuse_the_wrapper_gets_its_own_back(monkeypatch):
    """Where the wrapped function fails on the check compilation (another JAX), JAX's own
    ``get_compile_options`` is put back and the options are left out."""
    from jax._src import compiler

    original = getattr(compiler.get_compile_options, "grepvi_wrapped", compiler.get_compile_options)
    monkeypatch.setattr(compiler, "get_compile_options", original)
    monkeypatch.setattr(xla_extra_options, "_installed", None)
    merge = xla_extra_options.with_extra_options
    calls = []

    def refusing_merge(options, entries):
        calls.append(dict(entries))
        if entries.get("grepvi_probe") or not entries:  # the serialization probe passes
            return merge(options, entries)
        raise RuntimeError("this JAX's options cannot be merged")

    monkeypatch.setattr(xla_extra_options, "with_extra_options", refusing_merge)
    assert xla_extra_options.install() is False
    assert any(THRESHOLD in entries for entries in calls)  # the check compilation ran, and failed
    assert compiler.get_compile_options is original
    assert extra_options({THRESHOLD: "1"}) == {}


def test_the_resume_check_fails_on_a_changed_bit():
    from types import SimpleNamespace

    def run(params, elbo, iterations):
        convergence = SimpleNamespace(num_iterations=iterations)
        return SimpleNamespace(
            params=params, trace=SimpleNamespace(elbo=np.asarray(elbo)), convergence=convergence
        )

    full = run({"a": np.float32([1.0, 2.0])}, [1.0, 2.0, 3.0], 3)
    part = run({"a": np.float32([0.0, 0.0])}, [1.0], 1)
    assert_resumed_bitwise(full, part, run({"a": np.float32([1.0, 2.0])}, [2.0, 3.0], 3))
    off_by_a_bit = np.nextafter(np.float32(2.0), np.float32(3.0))
    for rest in (
        run({"a": np.float32([1.0, off_by_a_bit])}, [2.0, 3.0], 3),
        run({"a": np.float32([1.0, 2.0])}, [2.0, 3.5], 3),
        run({"a": np.float32([1.0, 2.0])}, [2.0, 3.0], 4),
    ):
        with pytest.raises(AssertionError):
            assert_resumed_bitwise(full, part, rest)

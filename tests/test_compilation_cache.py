"""``grepvi.inference.compilation_cache``: where the cache goes, how it is disabled, that it is written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grepvi.errors import ConfigError
from grepvi.inference import compilation_cache


def test_default_directory_follows_xdg_and_the_override(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.default_cache_dir() == tmp_path / "xdg" / "grepvi" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compilation_cache.default_cache_dir() == Path.home() / ".cache" / "grepvi" / "jax"
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    assert compilation_cache.default_cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize("value", ["0", "off", "false", ""])
def test_environment_disables(monkeypatch, tmp_path, value):
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, value)
    assert compilation_cache.default_cache_dir() is None
    assert compilation_cache.enable_persistent_cache(tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()


def test_a_file_as_directory_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache.ENVIRONMENT_VARIABLE, raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="path"):
        compilation_cache.enable_persistent_cache(blocker / "cache")


def test_a_compiled_program_is_written(tmp_path):
    """In a fresh process (the cache is process-wide): a compiled program lands in the directory."""
    code = (
        "import jax, jax.numpy as jnp\n"
        "from grepvi.inference.compilation_cache import enable_persistent_cache\n"
        f"enable_persistent_cache({str(tmp_path / 'cache')!r})\n"
        "from grepvi.sampling import log_gamma\n"
        "log_gamma(jax.random.key(0), jnp.ones(4)).block_until_ready()\n"  # compiles in > 0.1 s
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop(compilation_cache.ENVIRONMENT_VARIABLE, None)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    assert any((tmp_path / "cache").iterdir())


def test_step_compiler_options_for_cpu_models_by_size():
    import jax
    import jax.numpy as jnp

    small = compilation_cache.step_compiler_options(100, backend="cpu")
    assert small == compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    large = compilation_cache.step_compiler_options(10**6, backend="cpu")
    assert large == compilation_cache.LARGE_MODEL_COMPILER_OPTIONS == {"xla_backend_optimization_level": 3}
    assert compilation_cache.step_compiler_options(100, backend="gpu") == {}
    # XLA accepts them (a typo in an option name is an INVALID_ARGUMENT error at compile time)
    lowered = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(3))
    assert float(lowered.compile(compiler_options=small)(jnp.ones(3))[0]) == float(2 * jnp.sin(1.0))
    assert float(lowered.compile(compiler_options=large)(jnp.ones(3))[0]) == float(2 * jnp.sin(1.0))


def test_a_data_bound_small_step_keeps_the_fusion_emitters():
    """Special functions on ``DATA_BOUND_SPECIAL_ELEMENTS`` elements, or ``DATA_BOUND_FLOPS``,
    with at most ``MAX_GATHERED_ELEMENTS`` gathered: the fusion emitters; a gathering step, a
    light one and a large model keep their options."""
    import jax
    import jax.numpy as jnp

    options = compilation_cache.step_compiler_options
    data_bound = compilation_cache.DATA_BOUND_COMPILER_OPTIONS
    assert data_bound["xla_cpu_use_fusion_emitters"] is True
    special = compilation_cache.DATA_BOUND_SPECIAL_ELEMENTS
    assert options(100, "cpu", special_elements=special) == data_bound
    assert options(100, "cpu", flops=compilation_cache.DATA_BOUND_FLOPS) == data_bound
    assert (
        options(100, "cpu", special_elements=special - 1, flops=1e6)
        == compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    )
    gathers = compilation_cache.MAX_GATHERED_ELEMENTS + 1
    assert options(100, "cpu", special_elements=10 * special, gathered_elements=gathers) == (
        compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    )
    assert (
        options(10**6, "cpu", special_elements=10 * special) == compilation_cache.LARGE_MODEL_COMPILER_OPTIONS
    )
    assert options(100, "gpu", special_elements=10 * special) == {}
    lowered = jax.jit(lambda x: jax.lax.lgamma(x) * 2).lower(jnp.ones(3))
    assert abs(float(lowered.compile(compiler_options=data_bound)(jnp.ones(3))[0])) < 1e-5  # lgamma(1) = 0


def _window_options(monkeypatch, logdensity_fn, latents, data):
    """The compiler options :func:`grepvi.inference.fitting.setup` gives the default window."""
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import driver, fitting
    from grepvi.inference.state import make_target

    seen = []
    make_window = driver.make_window

    def recording(step_fn, length, *args, **kwargs):
        seen.append(kwargs["compiler_options"])
        return make_window(step_fn, length, *args, **kwargs)

    monkeypatch.setattr(driver, "make_window", recording)
    estimator = get_estimator("grep")
    target = make_target(logdensity_fn, latents, takes_data=True)
    target = target._replace(families=estimator.adapt_families(target.families))
    fitting.setup(target, estimator, data=data)
    assert seen  # the window was made
    return seen[0]


@pytest.mark.parametrize("rows, data_bound", [(10, False), (20_000, True)])
def test_the_step_profile_chooses_the_window_options(monkeypatch, rows, data_bound):
    """A negative-binomial likelihood (``lgamma`` of every row at each draw): 10 rows keep the
    small-model options, 20,000 rows are data-bound; the profile counts the step's special
    elements from its jaxpr (at least the rows' ``lgamma``) and its gathers (none)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import grepvi
    from grepvi.inference import fitting

    counts = jnp.asarray(np.random.default_rng(0).poisson(3.0, rows), jnp.float32)

    def logdensity_fn(z, data):
        r, mean = z["r"], z["mean"]
        log_p = jax.lax.lgamma(data + r) - jax.lax.lgamma(r) + r * jnp.log(r / (r + mean))
        return jnp.sum(log_p + data * jnp.log(mean / (r + mean))) - r - mean

    latents = {"r": grepvi.Gamma(), "mean": grepvi.Gamma()}
    options = _window_options(monkeypatch, logdensity_fn, latents, counts)
    expected = (
        compilation_cache.DATA_BOUND_COMPILER_OPTIONS
        if data_bound
        else compilation_cache.SMALL_MODEL_COMPILER_OPTIONS
    )
    assert options == expected
    jaxpr = jax.make_jaxpr(
        lambda x: jnp.sum(jax.lax.lgamma(x + 1.0)) + jnp.arange(5.0)[jnp.zeros(7, int)].sum()
    )
    profile = fitting.step_profile(jaxpr(counts).jaxpr)
    assert profile["special_elements"] == rows and profile["gathered_elements"] == 7

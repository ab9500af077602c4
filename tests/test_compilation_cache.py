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

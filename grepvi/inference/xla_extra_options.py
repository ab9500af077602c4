"""XLA's backend extra options, set for one compilation.

Some of XLA's CPU options live in ``DebugOptions.xla_backend_extra_options``, a map of
strings: ``xla_cpu_small_while_loop_byte_threshold`` among them (XLA's CPU backend emits a
``while`` loop whose bytes accessed are below it as one kernel, not one kernel per fusion run
by the thunk runtime trip by trip). JAX's ``compiler_options`` set ``DebugOptions``' scalar
fields by name and refuse a map ("not a valid message value"); ``XLA_FLAGS`` sets it for the
whole process, read once before its first compilation. Here a ``compiler_options`` dict
carries such options under :data:`EXTRA_OPTIONS_KEY` as ``"name=value,name=value"``:
:func:`install` wraps JAX's ``get_compile_options`` so that the key is taken out and its
entries appended to the serialized ``CompileOptionsProto`` (protobuf merges a nested message
appended to one, map entries included), so the persistent compilation cache's key, a hash of
the serialized options, includes them.

Field numbers (``xla/pjrt/proto/compile_options.proto``, ``xla/xla.proto``):
``CompileOptionsProto.executable_build_options`` 3,
``ExecutableBuildOptionsProto.debug_options`` 3, ``DebugOptions.xla_backend_extra_options``
500 (a map entry: key 1, value 2).
"""

import functools
import inspect

EXTRA_OPTIONS_KEY = "xla_backend_extra_options"
_BUILD_OPTIONS_FIELD = 3
_DEBUG_OPTIONS_FIELD = 3
_EXTRA_OPTIONS_FIELD = 500

_installed: bool | None = None  # None: not tried; False: JAX's internals did not allow it


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def parse_entries(text: str) -> dict[str, str]:
    """``"a=1,b=2"`` as ``{"a": "1", "b": "2"}`` (XLA_FLAGS' syntax for the map)."""
    entries = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise ValueError(f"{EXTRA_OPTIONS_KEY}: expected 'name=value' items, got {item!r}")
        entries[name.strip()] = value.strip()
    return entries


def extra_options_bytes(entries: dict[str, str]) -> bytes:
    """A serialized ``CompileOptionsProto`` holding only ``entries`` in its debug options'
    extra options map: appended to a serialized one, merged into it."""
    debug = b"".join(
        _length_delimited(
            _EXTRA_OPTIONS_FIELD,
            _length_delimited(1, name.encode()) + _length_delimited(2, value.encode()),
        )
        for name, value in entries.items()
    )
    return _length_delimited(_BUILD_OPTIONS_FIELD, _length_delimited(_DEBUG_OPTIONS_FIELD, debug))


def with_extra_options(compile_options, entries: dict[str, str]):
    """``compile_options`` (an ``xla_client.CompileOptions``) with ``entries`` added to its
    backend extra options (a new object)."""
    if not entries:
        return compile_options
    serialized = compile_options.SerializeAsString() + extra_options_bytes(entries)
    return type(compile_options).ParseFromString(serialized)


def install() -> bool:
    """Wraps ``jax._src.compiler.get_compile_options`` (once) to honour
    :data:`EXTRA_OPTIONS_KEY`; False where JAX's internals do not allow it (the caller then
    leaves the key out: XLA refuses an option it does not know). The wrapper is checked by
    compiling a one-line program with the key (at ``-O0``: 34 ms against 45 at XLA's default
    level, once a process); if that fails, JAX's own function is put back."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        import jax
        import jax.numpy as jnp
        from jax._src import compiler
        from jax._src.lib import xla_client

        original = getattr(compiler.get_compile_options, "grepvi_wrapped", compiler.get_compile_options)
        signature = inspect.signature(original)
        probe = with_extra_options(xla_client.CompileOptions(), {"grepvi_probe": "1"})
        _installed = "env_options_overrides" in signature.parameters and (
            b"grepvi_probe" in probe.SerializeAsString()
        )
    except Exception:  # noqa: BLE001 - another JAX: the options are left out, nothing breaks
        _installed = False
    if not _installed:
        return False

    @functools.wraps(original)
    def get_compile_options(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        overrides = bound.arguments.get("env_options_overrides")
        entries = {}
        if overrides and EXTRA_OPTIONS_KEY in overrides:
            overrides = dict(overrides)
            entries = parse_entries(overrides.pop(EXTRA_OPTIONS_KEY))
            bound.arguments["env_options_overrides"] = overrides
        return with_extra_options(original(*bound.args, **bound.kwargs), entries)

    get_compile_options.grepvi_wrapped = original
    compiler.get_compile_options = get_compile_options
    try:
        check = {
            EXTRA_OPTIONS_KEY: "xla_cpu_small_while_loop_byte_threshold=1000",
            "xla_backend_optimization_level": 0,  # compiled for compile time: a check, run never
        }
        jax.jit(lambda x: x + 1).lower(jnp.zeros(1, jnp.float32)).compile(check)
    except Exception:  # noqa: BLE001 - the wrapper does not work with this JAX: undone
        compiler.get_compile_options = original
        _installed = False
    return _installed


def extra_options(entries: dict[str, str]) -> dict:
    """A ``compiler_options`` dict setting ``entries`` in XLA's backend extra options, or an
    empty one where :func:`install` cannot."""
    if not entries or not install():
        return {}
    return {EXTRA_OPTIONS_KEY: ",".join(f"{name}={value}" for name, value in entries.items())}

"""Checks of the inputs grepvi takes, with errors in grepvi's words.

Each validator takes the value and the name the caller knows it by, returns the value in its
canonical type, and raises a :class:`~grepvi.errors.GrepviError` naming the argument, what was
expected and what was found, e.g. ``seed: expected an integer in [0, 2**32), found 'abc'``.
The command line shows the same messages with its flags (``--seed``).

>>> from grepvi import validation
>>> validation.positive_int(3.0, "num_steps")
3
>>> validation.shape((2, 3), "shape")
(2, 3)
"""

import math
import numbers

import numpy as np

from grepvi.errors import ConfigError, DataError, ModelError

__all__ = [
    "SEED_LIMIT",
    "positive_int",
    "non_negative_int",
    "positive_float",
    "seed",
    "shape",
    "data_pytree",
    "floating_scalar",
]

# Seeds are turned into a 32-bit key: seeds 2**32 and 0 would give the same random numbers.
SEED_LIMIT = 2**32


def _is_integral(value) -> bool:
    """An int, a NumPy integer, or a float / 0-d array holding a whole number (not a bool)."""
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, numbers.Integral):
        return True
    if getattr(value, "shape", None) == () and hasattr(value, "dtype"):  # NumPy / JAX 0-d arrays
        return _is_integral(np.asarray(value).item())
    if isinstance(value, numbers.Real):
        return math.isfinite(float(value)) and float(value) == int(value)
    return False


def positive_int(value, name: str, error=ConfigError) -> int:
    """``value`` as an ``int`` of at least 1 (``3.0`` is accepted, ``1.5``, ``True``, ``"3"`` are not)."""
    if not _is_integral(value) or int(value) < 1:
        raise error(f"{name}: expected a positive integer, found {value!r}")
    return int(value)


def non_negative_int(value, name: str, error=ConfigError) -> int:
    """``value`` as an ``int`` of at least 0."""
    if not _is_integral(value) or int(value) < 0:
        raise error(f"{name}: expected a non-negative integer, found {value!r}")
    return int(value)


def positive_float(value, name: str, error=ConfigError) -> float:
    """``value`` as a finite ``float`` above 0 (strings and bools are refused)."""
    if isinstance(value, bool | np.bool_ | str | bytes):
        raise error(f"{name}: expected a positive number, found {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise error(f"{name}: expected a positive number, found {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise error(f"{name}: expected a positive number, found {value!r}")
    return number


def seed(value, name: str = "seed") -> int:
    """A random seed: an integer in ``[0, 2**32)`` (larger ones would repeat smaller ones'
    random numbers; strings, floats with a fraction and bools are refused)."""
    if not _is_integral(value) or not 0 <= int(value) < SEED_LIMIT:
        raise ConfigError(f"{name}: expected an integer in [0, 2**32), found {value!r}")
    return int(value)


def shape(value, name: str = "shape", error=ModelError) -> tuple[int, ...]:
    """A latent's shape: a tuple of positive integers (an int ``n`` means ``(n,)``; ``()`` a scalar)."""
    if _is_integral(value) and not isinstance(value, float):
        value = (value,)
    elif isinstance(value, np.ndarray) and value.ndim == 1:
        value = tuple(value.tolist())
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise error(f"{name}: expected a tuple of positive integers like (3, 2), found {value!r}")
    for size in value:
        if not _is_integral(size) or isinstance(size, float) or int(size) < 1:
            raise error(f"{name}: expected a tuple of positive integers like (3, 2), found {value!r}")
    return tuple(int(size) for size in value)


def data_pytree(data, name: str = "data"):
    """``data`` checked to be a pytree (dict, list, tuple, ...) whose leaves are numeric arrays
    or numbers; strings, objects and empty pytrees are refused. Returns it unchanged."""
    import jax

    if data is None:
        return None
    leaves, _ = jax.tree_util.tree_flatten_with_path(data)
    if not leaves:
        raise DataError(
            f"{name}: expected a pytree of arrays (an array, or a dict of arrays), found {data!r}"
        )
    for path, leaf in leaves:
        where = f"{name}{jax.tree_util.keystr(path)}"
        if isinstance(leaf, str | bytes):
            raise DataError(
                f"{where}: expected an array of numbers, found the string {leaf!r}; data must be a "
                "pytree of arrays (an array, or a dict of arrays)"
            )
        dtype = getattr(leaf, "dtype", None)
        if dtype is None:
            if isinstance(leaf, bool | numbers.Number):
                continue
            try:
                dtype = np.asarray(leaf).dtype
            except (TypeError, ValueError):
                dtype = np.dtype(object)
        if not (np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.bool_)):
            raise DataError(
                f"{where}: expected an array of numbers, found {type(leaf).__name__} of dtype {dtype}; "
                "data must be a pytree of arrays (an array, or a dict of arrays)"
            )
    return data


def floating_scalar(value, name: str, error=ModelError):
    """``value`` checked to be a floating-point scalar (a JAX or NumPy array of shape ``()``
    and a float dtype, or a Python float): a density of integer dtype would truncate and its
    gradient vanish, so it is refused rather than fitted. Returns it unchanged."""
    if value is None:
        raise error(f"{name} returned None; it must return a floating-point scalar (log p(x, z))")
    if isinstance(value, float):
        return value
    dtype = getattr(value, "dtype", None)
    shape_ = getattr(value, "shape", None)
    if dtype is None or shape_ is None:
        raise error(
            f"{name} returned {type(value).__name__} {value!r}; it must return a floating-point "
            "scalar (a JAX array of shape () and a float dtype)"
        )
    if tuple(shape_) != ():
        raise error(f"{name} must return a scalar, returned shape {tuple(shape_)}")
    if not np.issubdtype(np.dtype(dtype), np.floating):
        raise error(
            f"{name} returned a value of dtype {dtype}; it must return a floating-point scalar "
            "(an integer log density has no gradient: compute it in floats, e.g. x * 1.0)"
        )
    return value

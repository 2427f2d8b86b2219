"""Identifier validation: names become table paths and column references, so they are checked
once at the boundary and never interpolated unchecked (SPEC section 4)."""
from __future__ import annotations

import re

from .errors import DefinitionError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a valid identifier, else raise naming ``what``."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise DefinitionError(
            f"{what} must match [A-Za-z_][A-Za-z0-9_]{{0,127}}, got {value!r}")
    return value


def quoted(column: str) -> str:
    """A validated column name in backticks, for SQL expression text."""
    return f"`{column}`"

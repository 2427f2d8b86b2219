"""Names and strings as SQL text: quoted, never interpolated raw (SPEC section 4: a name or a
path never becomes SQL syntax). Below every module that writes SQL, the session backends included."""

from __future__ import annotations


def quoted(name: str) -> str:
    """A name (a column, a path) as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A string as a SQL literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

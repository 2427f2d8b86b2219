"""The two forms a small file (a staging folder's markers, the gate's outcome, the status) takes
on disk, and reading its text from either: readers with Spark (``files.get_text``) and without
(the quality-gate task, ``operations.outcome``) share this, so it imports no Spark.

* A file, as a classic session writes it through Hadoop's file system.
* From a Spark Connect session, which writes files only as a Spark job does: a folder of that
  name holding the text in one part file, as one line of JSON (``_SUCCESS`` beside it).
  Removing it over Connect writes no rows in its place: an empty part file, read as nothing.
"""

from __future__ import annotations

import json

HIDDEN = ("_", ".")  # what names Spark's reads skip start with (``_SUCCESS``, checksum files)


def visible(name: str) -> bool:
    """Whether a file named ``name`` is one Spark's reads see (a part file, not a marker)."""
    return not name.startswith(HIDDEN)


def text_of(name: str, found: dict[str, str] | None) -> str | None:
    """The text of small file ``name`` from what is at its path, by file name: the file itself
    (``found`` holds ``name``), or the folder form's visible part files; None if nothing is
    there, or only empty part files."""
    if not found:
        return None
    if name in found:
        return found[name]
    parts = [text for _, text in sorted(found.items()) if text.strip()]
    return json.loads(parts[0].splitlines()[0]) if parts else None

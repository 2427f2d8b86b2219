"""The docs' relative links resolve: every ``[text](path#anchor)`` of the Markdown pages points at
a file of the repository and, with an anchor, at a heading of that page (GitHub's slugs); every
``docs/<page>.md#<anchor>`` that code, tests and the Makefile cite does too. Pure Python, no Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md"])
CITING = ["framework", "jobs", "dags", "scripts", "bench", "tests", "Makefile", "pyproject.toml"]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
CITED = re.compile(r"((?:docs|bench)/[\w.-]+\.md|README\.md)(#[\w-]+)?")


def _prose(text: str) -> list[str]:
    """The lines of a Markdown page outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, numbered as GitHub numbers repeated ones (``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def _broken(target: Path, anchor: str | None, where: str) -> str | None:
    if not target.exists():
        return f"{where}: {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} does not exist"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{where}: no heading #{anchor} in {target.relative_to(ROOT)}"
    return None


def test_slugs_are_githubs():
    assert slug("Quick start (fresh machine: Python 3.11, Java 17)") == "quick-start-fresh-machine-python-311-java-17"
    assert slug("`finalresults status`") == "finalresults-status"
    assert slug("Commit point and fencing") == "commit-point-and-fencing"
    assert slug("Tables (under `<warehouse>/<pipeline>/`)") == "tables-under-warehousepipeline"
    assert slug("Partitioned asset events (Airflow 3.2+)") == "partitioned-asset-events-airflow-32"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_links_resolve(page: Path):
    assert page.exists(), f"{page} is missing"
    broken = []
    prose = INLINE_CODE.sub("", "\n".join(_prose(page.read_text())))  # a link's text may wrap
    targets = LINK.findall(prose)
    assert targets, f"{page} links nowhere: is the pattern still right?"
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file: ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        problem = _broken(resolved, anchor or None, f"{page.relative_to(ROOT)}: [..]({target})")
        if problem:
            broken.append(problem)
    assert not broken, "\n".join(broken)


def _citing_files() -> list[Path]:
    """Code, tests, scripts and build files (not benchmark results, not this file)."""
    found = []
    for name in CITING:
        root = ROOT / name
        for f in [root] if root.is_file() else sorted(root.rglob("*")):
            if f.is_file() and f.suffix in (".py", ".json", ".toml", "") and "results" not in f.parts:
                found.append(f)
    return [f for f in found if f != Path(__file__)]


def test_cited_pages_and_anchors_resolve():
    """Docstrings and messages cite ``docs/design.md#<anchor>`` and the like: each must exist."""
    broken = []
    for f in _citing_files():
        for number, line in enumerate(f.read_text(errors="ignore").splitlines(), 1):
            for path, anchor in CITED.findall(line):
                problem = _broken(ROOT / path, anchor.lstrip("#") or None, f"{f.relative_to(ROOT)}:{number}")
                if problem:
                    broken.append(problem)
    assert not broken, "\n".join(broken)

"""Great Expectations Data Docs that render without network access.

GX's pages load Bootstrap, jQuery and bootstrap-table from CDNs; offline (a plant network, an
air-gapped cluster, a laptop on a train) the index is bare links with empty lists. After GX
writes its pages, ``make_offline`` points those pages at copies shipped with this package
(``data_docs_assets/``, the exact versions GX asks for; licenses in ``LICENSES.txt``) and at
GX's own images, copied under ``<data_docs>/static/vendor/``; Font Awesome's stylesheet and
fonts give way to ``icons.css``, the five icons GX uses as characters. Remote scripts, styles and
images it has no copy of (Vega, used by no expectation of ours) are left out, so a page never
waits on the network. Links to web pages (``<a href>``) stay as they are.

``Site`` reads a warehouse's Data Docs without Spark or GX, from local disk or an object store
(``outcome.filesystem``, as the quality-gate task reads its outcome), for the Airflow plugin and
the status page: one folder holds every pipeline's pages, so it finds a pipeline's validation
pages by suite (GX names a pipeline's suite after it, ``suites.load_suite``) and tells which
files a reader of one pipeline may see (``of_suite``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import outcome

ASSETS = Path(__file__).with_name("data_docs_assets")
#: An element that fetches a remote file when the page loads: a script, a stylesheet, an image.
_REMOTE = re.compile(r'<(script|link|img)\b[^>]*?\b(?:src|href)="(https?://[^"]+)"[^>]*>(?:\s*</script>)?', re.I)
#: A remote file by another name here: Font Awesome's stylesheet (all its icons, and web fonts) by ours.
ALIASES = {"all.min.css": "icons.css"}
#: A remote image in a style (GX's dark-mode logo): not drawn offline.
_REMOTE_IMAGE = re.compile(r"url\('https?://[^']+'\)")
_UNTRUSTED_ORIGIN = re.compile(r'\s(?:integrity|crossorigin)="[^"]*"')  # file:// pages cannot check either


def make_offline(data_docs: Path, pages: Iterable[Path]) -> int:
    """Rewrite ``pages`` (files under ``data_docs`` GX just wrote: a validation's page, its suite's,
    the index) to load nothing remote. Named, not found by walking the folder: that walk grows with
    every validation kept. Returns the number of pages rewritten."""
    vendor = data_docs / "static" / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    for asset in ASSETS.glob("*.*"):
        if not (vendor / asset.name).exists():
            shutil.copyfile(asset, vendor / asset.name)
    copies = (*vendor.iterdir(), *data_docs.glob("static/images/*"))
    local = {p.name: p.relative_to(data_docs).as_posix() for p in copies}
    rewritten = 0
    for page in pages:
        if not page.is_file():
            continue
        up = "../" * (len(page.relative_to(data_docs).parts) - 1)

        def served_here(m: re.Match) -> str:
            name = m[2].split("?")[0].rsplit("/", 1)[-1]
            name = ALIASES.get(name, name)
            return _UNTRUSTED_ORIGIN.sub("", m[0].replace(m[2], up + local[name])) if name in local else ""

        text = page.read_text("utf-8")
        offline = _REMOTE_IMAGE.sub("none", _REMOTE.sub(served_here, text))
        if offline != text:  # replaced whole: another runner's reader never sees half a page
            partial = page.with_name(f".{page.name}.offline")
            partial.write_text(offline, "utf-8")
            os.replace(partial, page)
            rewritten += 1
    return rewritten


@dataclass(frozen=True)
class Page:
    """A validation page, as GX lays them out: ``validations/<suite>/<run name>/<run time>/<batch>.html``
    (run name = the batch id, ``results-table`` for a validation of the whole table)."""

    suite: str
    run_name: str
    run_time: str  # GX's UTC stamp, 20260101T010203.456789Z: sorts by time
    path: str  # relative to the site's folder


class Site:
    """The Data Docs of the warehouse ``warehouse`` (``<warehouse>/data_docs``), read as files."""

    def __init__(self, warehouse: str):
        self.files, self.root = outcome.filesystem(f"{warehouse.rstrip('/')}/data_docs")

    def pages(self, suite: str | None = None) -> list[Page]:
        """The validation pages of ``suite`` (None: of every suite), oldest first; none if no folder."""
        from pyarrow import fs

        under = f"{self.root}/validations" + (f"/{suite}" if suite else "")
        found = []
        for info in self.files.get_file_info(fs.FileSelector(under, recursive=True, allow_not_found=True)):
            parts = info.path[len(self.root) + 1 :].split("/")
            if info.type == fs.FileType.File and len(parts) == 5 and parts[-1].endswith(".html"):
                found.append(Page(parts[1], parts[2], parts[3], "/".join(parts)))
        return sorted(found, key=lambda p: (p.run_time, p.path))

    def read(self, path: str) -> bytes | None:
        """The file at ``path`` (relative, as ``of_suite`` accepts it), or None if there is none."""
        from pyarrow import fs

        where = f"{self.root}/{path}"
        if self.files.get_file_info(where).type != fs.FileType.File:
            return None
        with self.files.open_input_stream(where) as stream:
            return stream.read()


def of_suite(path: str, suite: str) -> bool:
    """Whether the site's file ``path`` (relative, ``/`` between parts) is one a reader of
    ``suite``'s pipeline may see: its validation pages, its suite's page, and the shared
    ``static`` files (styles, scripts, images: no data). Another pipeline's pages, GX's index of
    every pipeline's runs, and what is no plain relative path (``..``, empty parts, a backslash)
    are not."""
    parts = path.split("/")
    if any(part in ("", ".", "..") or "\\" in part for part in parts):
        return False
    return parts[0] == "static" or parts[:2] == ["validations", suite] or parts == ["expectations", f"{suite}.html"]

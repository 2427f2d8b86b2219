"""Great Expectations Data Docs that render without network access.

GX's pages load Bootstrap, jQuery and bootstrap-table from CDNs; offline (a plant network, an
air-gapped cluster, a laptop on a train) the index is bare links with empty lists. After GX
writes its pages, ``make_offline`` points those pages at copies shipped with this package
(``data_docs_assets/``, the exact versions GX asks for; licenses in ``LICENSES.txt``) and at
GX's own images, copied under ``<data_docs>/static/vendor/``; Font Awesome's stylesheet and
fonts give way to ``icons.css``, the five icons GX uses as characters. Remote scripts, styles and
images it has no copy of (Vega, used by no expectation of ours) are left out, so a page never
waits on the network. Links to web pages (``<a href>``) stay as they are.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

ASSETS = Path(__file__).with_name("data_docs_assets")
#: An element that fetches a remote file when the page loads: a script, a stylesheet, an image.
_REMOTE = re.compile(r'<(script|link|img)\b[^>]*?\b(?:src|href)="(https?://[^"]+)"[^>]*>(?:\s*</script>)?', re.I)
#: A remote file by another name here: Font Awesome's stylesheet (all its icons, and web fonts) by ours.
ALIASES = {"all.min.css": "icons.css"}
#: A remote image in a style (GX's dark-mode logo): not drawn offline.
_REMOTE_IMAGE = re.compile(r"url\('https?://[^']+'\)")
_UNTRUSTED_ORIGIN = re.compile(r'\s(?:integrity|crossorigin)="[^"]*"')  # file:// pages cannot check either


def make_offline(data_docs: Path, since: float = 0) -> int:
    """Rewrite the pages under ``data_docs`` written at or after ``since`` (a time stamp; GX
    rewrites the index and the pages of each validation it renders) to load nothing remote.
    Returns the number of pages rewritten."""
    vendor = data_docs / "static" / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    for asset in ASSETS.glob("*.*"):
        if not (vendor / asset.name).exists():
            shutil.copyfile(asset, vendor / asset.name)
    copies = (*vendor.iterdir(), *data_docs.glob("static/images/*"))
    local = {p.name: p.relative_to(data_docs).as_posix() for p in copies}
    rewritten = 0
    for page in data_docs.rglob("*.html"):
        if page.stat().st_mtime < since:
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

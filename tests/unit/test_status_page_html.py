"""The status page's HTML from given pipeline states, without a warehouse (no Spark)."""

import xml.etree.ElementTree as ET

from framework.operations.statuspage import PipelineState, page
from framework.storage.metrics import KIP_NAMES


def test_text_is_escaped():
    batch = '<script>alert("x")</script> & co'
    text = page(
        "/lake/<&>",
        [
            PipelineState(
                "p", "p  (/lake/<&>/p)\n  last batch <b>", [{"seq": 1, "batch_id": batch, **{c: 1 for c in KIP_NAMES}}]
            )
        ],
    )
    tree = ET.fromstring(text)  # well formed, and no element came from the text
    assert not list(tree.iter("script")) and not list(tree.find(".//pre"))
    assert batch in [c.find("title").text.split(" · ")[1] for c in tree.iter("circle")]
    assert "last batch <b>" in tree.find(".//pre").text and "/lake/<&>" in tree.find(".//title").text

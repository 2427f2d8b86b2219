"""The publication marker a staging folder holds (``publication.Manifest``): what earlier versions
wrote still reads, and what this one writes reads back the same."""

import json

from framework.operations.publication import Manifest, ReplayedRange


def test_a_batch_marker_of_an_earlier_version_without_schemas_reads():
    old = json.dumps({"replay": False, "staged": ["output"]})
    assert Manifest.from_json(old) == Manifest(("output",))


def test_a_replay_marker_of_an_earlier_version_reads_its_range_and_ignores_what_it_no_longer_uses():
    old = json.dumps(
        {
            "replay": True,
            "staged": [],
            "first_seq": 3,
            "first_batch_id": "b3",
            "last_seq": 5,
            "last_batch_id": "b5",
            "output_base": None,
            "fence": 7,
        }
    )
    assert Manifest.from_json(old) == Manifest((), replay=ReplayedRange("b3", "b5", None, 7))


def test_a_marker_reads_back_as_written_in_the_flat_form_earlier_versions_read():
    batch = Manifest(("output",), {"output": '{"type": "struct", "fields": []}'})
    replay = Manifest(("output",), replay=ReplayedRange("b'1", "b2", 4, 9))
    for m in (batch, replay):
        assert Manifest.from_json(m.to_json()) == m
    flat = json.loads(replay.to_json())
    assert (flat["replay"], flat["staged"], flat["first_batch_id"], flat["fence"]) == (True, ["output"], "b'1", 9)
    assert json.loads(batch.to_json())["replay"] is False

"""A pipeline's versions without Spark: the version a definition says, where each version keeps
its tables, and what a job's VERSIONS may hold (building and switching: tests/test_versions.py)."""

import pytest

from framework import DefinitionError, Pipeline, agg
from framework.orchestration.jobs import JobError, versions_of
from framework.storage import versions


def _alerts(version=1, name="alerts"):
    return Pipeline(name, version=version).group_by("k").aggregate(agg.count("n")).to("out")


@pytest.mark.parametrize("bad", [0, -1, True, "2", 1.5])
def test_a_version_is_a_whole_number_from_1(bad):
    with pytest.raises(DefinitionError, match="version must be a whole number from 1"):
        Pipeline("alerts", version=bad)


def test_describe_names_a_later_version_and_the_versions_folder_is_reserved():
    assert _alerts(3).describe().startswith("Topology: alerts (version 3)\n")
    assert _alerts(1).describe().startswith("Topology: alerts\n")
    with pytest.raises(DefinitionError, match="versions folder"):
        Pipeline("alerts").group_by("k").aggregate(agg.count("n")).to("_Versions")


def test_version_1_keeps_the_pipeline_folder_and_later_ones_a_folder_each():
    assert versions.root("/lake/", "alerts", 1) == "/lake/alerts"
    assert versions.root("s3a://b/lake", "alerts", 2) == "s3a://b/lake/alerts/_versions/v2"
    assert versions.switches_path("/lake", "alerts") == "/lake/alerts/_versions/switches"


def test_a_jobs_versions_are_pipelines_of_its_name_one_per_version():
    assert sorted(versions_of(_alerts(2), (_alerts(1),))) == [1, 2]
    assert versions_of(_alerts(1), (_alerts(1),)) == {1: _alerts(1)}  # the same definition twice is one
    with pytest.raises(JobError, match="not a Pipeline of that name"):
        versions_of(_alerts(2), (_alerts(1, name="other"),))
    with pytest.raises(JobError, match="two definitions of version 1"):
        versions_of(_alerts(2), (_alerts(1), Pipeline("alerts").group_by("k").aggregate(agg.count("m")).to("out")))

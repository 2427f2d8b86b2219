"""A session's backend (framework.storage.backend) without a JVM or a server: a Spark Connect
session is told by having no JVM, and the LogStore in force is read from the server's conf as
its session answers it, so an S3 warehouse is refused where Delta would commit with its
single-driver default (issue 61: the check reached for a JVM and failed over Connect)."""

import pytest

from framework.errors import FrameworkError
from framework.storage import backend, locks
from framework.storage.s3 import LOGSTORE_CLASS

SINGLE_DRIVER = "io.delta.storage.S3SingleDriverLogStore"


class ConnectLike:
    """What the Connect backend asks of its session for the LogStore: the conf (no JVM)."""

    def __init__(self, conf: dict[str, str] | None = None):
        self.conf = conf or {}  # ``get(key, default)``, as a Connect session's conf answers


def test_a_session_without_a_jvm_has_the_connect_backend_chosen_once():
    session = ConnectLike()
    chosen = backend.of(session)
    assert isinstance(chosen, backend.ConnectBackend) and backend.of(session) is chosen
    assert not chosen.observes_checkpoints  # planning's one-pass read stays classic
    assert backend.of(ConnectLike()) is not chosen  # one per session


@pytest.mark.parametrize(
    "conf, path, store",
    [
        ({}, "s3a://bucket/lake", SINGLE_DRIVER),
        ({"spark.delta.logStore.s3a.impl": LOGSTORE_CLASS}, "s3a://bucket/lake", LOGSTORE_CLASS),
        ({"delta.logStore.s3a.impl": LOGSTORE_CLASS}, "s3a://bucket/lake", LOGSTORE_CLASS),  # Delta reads both
        ({"spark.delta.logStore.class": "x.DynamoDBStore"}, "s3a://bucket/lake", "x.DynamoDBStore"),
        ({"spark.delta.logStore.s3.impl": LOGSTORE_CLASS}, "s3a://bucket/lake", SINGLE_DRIVER),  # another scheme's
        ({}, "gs://bucket/lake", "io.delta.storage.GCSLogStore"),
        ({}, "/data/lake", "io.delta.storage.HDFSLogStore"),
    ],
)
def test_the_logstore_in_force_over_connect_is_the_one_delta_picks_from_the_servers_conf(conf, path, store):
    assert backend.of(ConnectLike(conf)).logstore(path) == store


def test_an_s3_warehouse_over_connect_is_refused_where_the_server_commits_with_one_driver_only():
    with pytest.raises(FrameworkError, match="S3SingleDriverLogStore, which is not known to commit atomically"):
        locks.check_atomic_commits(ConnectLike(), "s3a://bucket/lake")
    locks.check_atomic_commits(ConnectLike({"spark.delta.logStore.s3a.impl": LOGSTORE_CLASS}), "s3a://bucket/lake")
    locks.check_atomic_commits(ConnectLike(), "/data/lake")  # a local disk: the file lock

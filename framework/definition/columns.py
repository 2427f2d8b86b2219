"""Glossary of the working columns the framework adds to records and state rows.

Input columns starting with ``_`` are refused unless the pipeline reads them (``sources``), so
these names do not collide with what a batch carries along. Times are epoch milliseconds (``long``).

Per record, while a batch is planned:

- ``TS``            the record's event time
- ``STREAM_BEFORE`` stream time just before the record (``lateness="record"``) or before the
                    batch (``lateness="batch"``): a record joins a window only while the window's
                    close time is above it
- ``ARRIVAL``       ``struct(seq, pos)``: batch sequence number and position in the batch, the
                    order order-sensitive aggregates (``latest``, ``collect_list``) follow

Per window in ``window_state`` (and in the rows a batch plans):

- ``CLOSE``         the window's close time (end + grace; sessions: end + gap + grace)
- ``BUCKET``        ``CLOSE // bucket``: the partition, so closing reads only due buckets
- ``MAX_TS``        the latest event time the window holds
- ``GONE``          in planned state changes only: the row is deleted (a merged-away session)

Per kept record in ``records`` (sliding windows): ``TS``, ``ARRIVAL`` and ``TIME_BUCKET``
(``TS // bucket``, its partition).
"""

TS = "_ts"
STREAM_BEFORE = "_sb"
ARRIVAL = "_ord"
CLOSE = "_close"
BUCKET = "_bucket"
TIME_BUCKET = "_tbucket"
MAX_TS = "_max_ts"
GONE = "_gone"

"""Glossary of the working columns the framework adds to records, state rows and buffer entries.

Input columns starting with ``_`` are refused unless the pipeline reads them (``sources``), so
these names do not collide with what a batch carries along. Times are epoch milliseconds (``long``).
In SQL text the names go in through f-strings, so a name is spelled in this module only.

Per record, while a batch is planned:

- ``TS``            the record's event time
- ``STREAM_BEFORE`` stream time just before the record (``lateness="record"``) or before the
                    batch (``lateness="batch"``): a record joins a window only while the window's
                    close time is above it
- ``STREAM_AFTER``  stream time just after the record: ``greatest(STREAM_BEFORE, TS)``
- ``ARRIVAL``       ``struct(seq, pos)``: batch sequence number and position in the batch, the
                    order order-sensitive aggregates (``latest``, ``collect_list``) follow;
                    ``ARRIVAL_POS`` is its position field
- ``POS``           a position in the batch taken out of ``ARRIVAL`` (rate limiting's updates)
- ``STEP``          rate limiting: an update's place among its record's updates
- ``IN_TIME``, ``NEWEST``   time windows, per record and window holding it: the window was still
                    open when the record arrived; it is the record's newest window
- ``RECORD``        a late record as given, as JSON
- ``RECORDS``       time windows, per row a batch's one pass keeps: the records whose newest window
                    it is (a late record's row: how many such records the batch holds)
- ``TOUCH``         rate limiting: the row is an update of its entry (not only a part of its value)
- ``UPDATED_AT``    an update's time, as Kafka stamps it (``execution.batch``: the updates' shape)
- ``INTERVAL``      a chunk of a range (``operations.chunk``): the index of the record's interval in
                    the chunk (its batch is the chunk's first seq plus it); on a late record's row
                    and a time window's partials (the first interval that updated it) too, and on
                    a result row, the interval whose stream time closed the window

Per window in ``_state``'s window rows (and in the rows a batch plans):

- ``CLOSE``         the window's close time (``Windows.close``: the end plus what the window type adds)
- ``BUCKET``        ``CLOSE // bucket``: the partition, so closing reads only due buckets
- ``MAX_TS``        the latest event time the window holds (for sliding windows, Kafka's
                    timestamp of the window, which the fold finds previous records by)
- ``GONE``          in planned state changes and sink rows only: the row is deleted (a session
                    merged away, or replaced by an extension)

In ``_state``, where window state shares one Delta table with what the framework keeps about
each batch (``framework.storage.ledger``): a row whose ``BUCKET`` is ``LEDGER_BUCKET`` is a ledger
row, one whose ``BUCKET`` is ``LATE_BUCKET`` a late record, ``REJECTED_BUCKET`` a record a
quarantining pipeline left out of its batch; ``SEQ`` is its batch's sequence number
and ``ENTRY`` the row itself as JSON. Window rows have a bucket >= 0 and these two null.

Per entry of a rate-limiting suppression buffer: ``BUFFER_TIME`` (the time its time limit counts
from), ``SIZE`` (bytes of its value), ``ENTRY_KEY`` (the key as text, ordering entries of equal
time); per emitted row ``EMITTED_AT``, the stream time it left at; per position of a batch
``COUNT_CHANGE`` and ``BYTES_CHANGE``, the entries and bytes the buffer gained (or lost) there.
"""

TS = "_ts"
STREAM_BEFORE = "_sb"
STREAM_AFTER = "_sa"
ARRIVAL = "_ord"
ARRIVAL_POS = f"{ARRIVAL}.pos"
POS = "_pos"
STEP = "_step"
IN_TIME = "_in_time"
NEWEST = "_newest"
RECORD = "_record"
RECORDS = "_records"
TOUCH = "_touch"
UPDATED_AT = "_ut"
INTERVAL = "_iv"
CLOSE = "_close"
BUCKET = "_bucket"
MAX_TS = "_max_ts"
GONE = "_gone"
BUFFER_TIME = "_bt"
SIZE = "_size"
ENTRY_KEY = "_key"
EMITTED_AT = "_est"
COUNT_CHANGE = "_dc"
BYTES_CHANGE = "_db"
SEQ = "_seq"
ENTRY = "_entry"
LEDGER_BUCKET = -1
LATE_BUCKET = -2
REJECTED_BUCKET = -3

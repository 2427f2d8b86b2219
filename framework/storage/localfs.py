"""Hadoop settings for warehouses on a local disk (``file:`` paths only; no other store changes).

Hadoop's default local file system writes a ``.crc`` file beside every file it writes, which
doubles the entries of every Delta log, and Delta lists a table's whole log on each read and
commit (13 us per entry, ``bench/delta_log.py``). The raw local file system writes none. Both
file-system APIs are set: Delta's log store writes commits through ``FileContext``, data and
checkpoints through ``FileSystem``. spark-submit opens the local file system before a job's
session exists, and Hadoop caches it, so jobs need these on the command line too
(``framework.airflow``).
"""

LOCAL_FS_CONF = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}

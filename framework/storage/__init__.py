"""Where a pipeline's tables live and how they are written safely: table layout, commit locks,
idempotent writes, staged rows, the ledger (the commit point), sinks and catalog tables."""

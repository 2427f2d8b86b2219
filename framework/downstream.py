"""Public: reading a committed batch's rows and delivering them once, for downstream DAGs.
Implemented in ``framework.operations.downstream``."""

from .operations.downstream import batch_rows, deliver_once

__all__ = ["batch_rows", "deliver_once"]

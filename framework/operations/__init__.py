"""Running pipelines: the batch protocol (``Runtime`` over one ``BatchAttempt`` per batch),
replay, the quality gate, status and downstream delivery."""

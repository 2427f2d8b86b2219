"""What a pipeline is: pure values, no Spark. Windows, suppression, aggregates and the
``Pipeline`` builder that validates them together."""

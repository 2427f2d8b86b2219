"""How a batch is computed: Spark DataFrame plans over the input and the state as of the last
committed batch. Nothing here writes a table."""

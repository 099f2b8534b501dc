"""The algorithm-agnostic learning engine: spec types, the data-parallel update, init,
optimizers, shared loss helpers and checkpoints. Nothing here names an algorithm."""

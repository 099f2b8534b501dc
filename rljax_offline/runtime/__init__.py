"""Process plumbing that is no part of the maths: background threads, prefetching,
the garbage-collector pause, host memory, the compilation cache and `jax.distributed`."""

"""Lock strategy: the callable runs only while it holds a lease on its key (the lease engine is `resilience._lease`)."""

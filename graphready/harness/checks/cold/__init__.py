"""GD203: a capture with no warm-up, in a worker of its own, and the first-call work it does."""

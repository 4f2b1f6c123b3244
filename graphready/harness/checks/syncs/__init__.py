"""GD101 and GD102: the CPU waiting for the GPU inside a step, seen by torch's sync debug mode or by timing it."""

"""GD301-GD303, GD306 and GD308: replay against eager, the state a step carries, outputs the next replay overwrites."""

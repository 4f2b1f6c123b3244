"""GD301-GD303, GD306, GD308 and GD309: replay against eager, the state a step carries, outputs the next
replay overwrites, a graph replayed for a padded batch."""

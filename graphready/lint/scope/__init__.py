"""Which code is hot: the per-file ast index, eager-only regions, attribute types, and the call-graph walk."""

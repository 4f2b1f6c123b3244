"""Running the libcst rules over hot functions: parsing, traversal, rule context and plain-data hits."""

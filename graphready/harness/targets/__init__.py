"""Built-in targets for `graphready check` (`graphready check dsv4`)."""

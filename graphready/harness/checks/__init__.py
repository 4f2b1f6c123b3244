"""One module per dynamic check; `graphready.harness.session` runs them in order on one unit."""

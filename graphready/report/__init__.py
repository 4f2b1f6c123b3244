"""`graphready report`: one triage report (HTML, Markdown) from lint and check results."""

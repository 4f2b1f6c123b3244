"""`graphready lint`: index (ast) -> hot path -> libcst rules -> suppressions -> baseline -> output."""

"""GD304, GD305 and GD307: the addresses a captured graph holds, who owns them and who reaches them."""

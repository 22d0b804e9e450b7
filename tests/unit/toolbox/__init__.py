"""shelldon tools: list, show, restore, export and import."""

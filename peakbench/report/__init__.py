"""Results, their JSON form, and the renderers (table, Markdown, CSV, compare)."""

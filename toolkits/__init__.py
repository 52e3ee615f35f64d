"""Command-line tools shipped with rlinf (checkpoint converters and helpers arrive with their issues)."""

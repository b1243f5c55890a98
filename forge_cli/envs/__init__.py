"""Task sources: where tasks come from and how each is verified."""

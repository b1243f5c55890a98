"""Thin Typer commands that compose the other parts; no logic of their own."""

"""Sandboxes: one interface, backends local, docker and kubernetes."""

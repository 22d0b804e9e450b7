"""Thespian actors that wire the shelldon library into a running system. Thin by rule."""

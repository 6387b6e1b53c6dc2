"""Jinja templates for the generated submission."""

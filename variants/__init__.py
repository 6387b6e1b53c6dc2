"""Variant knob files (YAML); this package only locates them."""

"""The rich console every command prints through."""
import os


def make_console(**options):
    """A rich Console; written to a log or a pipe it is 160 columns wide, since rich's
    default of 80 there would wrap the per-case tables into unreadable cells."""
    from rich.console import Console

    console = Console(**options)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160
    return console

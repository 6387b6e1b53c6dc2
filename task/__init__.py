"""The qr_v2 harness, laid beside a submission by `qrsub test --local` (package qrsub.task).

A process started at the checkout root (`python -m pytest`, `python -c ...`) finds
this folder as a plain `task` package before the harness's own `task.py`. So the
package hands out task.py's names: the harness's and the submission's
`from task import input_t, output_t` work whichever of the two Python found first.
"""
from .task import TestSpec, input_t, output_t
__all__ = ["TestSpec", "input_t", "output_t"]

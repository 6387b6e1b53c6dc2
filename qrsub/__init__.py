"""qrsub: build, test, benchmark and submit qr_v2 submissions."""
from pathlib import Path as _Path

__version__ = "0.1.0"

# The sub-packages live in top-level folders of the checkout (kernels/, submit/, task/,
# variants/, templates/). An install maps them under qrsub; run from a checkout without
# one (the repository root on sys.path, as on a bare GPU machine), they are found here.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "kernels" / "__init__.py").is_file():
    __path__.append(str(_checkout))

"""qrsub: build, test, benchmark and submit qr_v2 submissions."""

__version__ = "0.1.0"

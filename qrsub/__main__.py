"""`python -m qrsub`: the command line, for machines where the console script is not installed."""
from qrsub.cli import main

main(prog_name="qrsub")

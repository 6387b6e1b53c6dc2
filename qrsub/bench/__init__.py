"""`qrsub bench`'s machinery, in three parts:

- engine: the case loop, the stop rule and the interleaving (ABBA rounds), against any Timer;
- timer: HarnessTimer, which loads submissions and times them as the harness does;
- report: the summary, the tables, the plot and the dry-run description.
"""

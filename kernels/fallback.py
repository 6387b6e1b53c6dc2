"""How a route's fallback to torch.geqrf shows outside the submission.

routing.py falls back only when a route's kernels do not build on this machine
(the submission's safety net on the service). Everywhere else the tools make it
loud (qrsub/fallbacks.py reads these names). Pure Python: the tools import it
without torch.
"""
# Set to 1 (qrsub's tools do): a route that does not build raises instead of falling back.
STRICT_ENV = "QRSUB_STRICT_ROUTES"
# Printed once to stderr when a route falls back.
FALLBACK_LINE = "qrsub: route '{route}' fell back to torch.geqrf: {reason}"
# The submission's module-level list of (route, reason), one entry per route that fell back.
FALLBACK_LIST = "FALLBACKS"

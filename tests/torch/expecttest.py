"""Stand-in for the `expecttest` package, which torch.testing imports but
Debian 12 does not ship. Only what torch.testing._internal uses at import:
nothing here accepts or rewrites expected output."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

"""`gputop` as another interpreter sees it through `gputop probe-path`: the probe, nothing else.

`PYTHONPATH=$(gputop probe-path) python -m gputop.probe train.py` (or `from gputop import
probe` in train.py) works from any environment, gputop installed there or not. This
directory holds only this stand-in package, so none of the packages beside gputop
(textual, rich, ...) come along to shadow the user's own; the modules themselves, the
standard-library probe among them, load from the real package.
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))  # .../gputop/probe/_path/gputop
__path__ = [_os.path.dirname(_os.path.dirname(_os.path.dirname(_here)))]  # .../gputop

"""The one exception type for wrong options: :class:`ArgumentError`.

It lives in the lowest layer so that every layer that checks an option raises the same class: the training layer's
argument checks (``training/checks.py``), the serving layer's options (``serving/options.py``: ``RankerOptions``,
``ServeConfig``, ``ScoreConfig``) and the commands. The commands print it as one line (``run_scripts.arguments``'s
``run_cli``). ``as2hub.training.ArgumentError`` and ``as2hub.run_scripts.arguments.ArgumentError`` are this class.
"""


class ArgumentError(ValueError):
    """Invalid or contradictory command-line arguments; the message says what to change."""

"""Exceptions that carry a message a user can act on.

Every error raised on bad input names its culprit (file, row, column, key, value); the CLI prints
the message and exits non-zero without a traceback.
"""


class RecurbenchError(Exception):
    """Base class for errors recurbench reports to the user as a plain message."""


class DataError(RecurbenchError):
    """A dataset file is missing, corrupt, malformed or too short for the requested windows."""


class ConfigError(RecurbenchError, ValueError):
    """A suite/config file, a command-line choice or an estimator's hyperparameter is invalid (also a
    ``ValueError``, what scikit-learn-style code expects of a bad parameter)."""


class ModelOutputError(RecurbenchError, ValueError):
    """A model's output is not what its suite's contract says (its shape): a plugin's mistake that
    training would otherwise broadcast over and score."""


class DataWarning(UserWarning):
    """Runs proceed on data whose results need not compare with the published ones: a registered
    dataset's file that is not the one its registry entry pins (its sha256 differs), or a MiniGrid
    train/test pair from two families."""

"""The one exception type for problems a user can fix.

Everything that is the user's input (a config key, a path, a flag) raises :class:`UserError`
with a message that names the bad value and the fix. The CLI turns it into a one-line
``electra: error: ...`` and exit code 2; library callers get an ordinary ``ValueError``.
"""


class UserError(ValueError):
    """Bad input that the user can fix; the message names the value and the fix.

    ``shared``: every process of a torchrun launch raised it, so only rank 0 prints it.
    """

    shared: bool = False

"""The one exception type for problems a user can fix.

Everything that is the user's input (a config key, a path, a flag) raises :class:`UserError`
with a message that names the bad value and the fix. The CLI turns it into a one-line
``electra: error: ...`` and exit code 2; library callers get an ordinary ``ValueError``.
"""

import signal


class UserError(ValueError):
    """Bad input that the user can fix; the message names the value and the fix.

    ``shared``: every process of a torchrun launch raised it, so only rank 0 prints it.
    """

    shared: bool = False


class Stopped(KeyboardInterrupt):
    """A stop asked for by a signal (``signum``): every command then does what it does on
    Ctrl-C and exits ``128 + signum`` (electra.train.stop installs the handlers);
    ``together``: every rank stops at this step and saves with the others (rather than rank
    0 alone, as on Ctrl-C)."""

    def __init__(self, signum: int, together: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.together = signum, together

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

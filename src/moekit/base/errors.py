"""Errors a user can cause. The CLI prints them without a traceback and exits non-zero."""


class MoekitError(Exception):
    """A problem the user can fix; the message says what is wrong and how to fix it."""

    exit_code = 2


class ConfigError(MoekitError):
    """The composed configuration is invalid (before anything is launched)."""

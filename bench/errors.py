"""The one exception type for mistakes a user can fix."""


class BenchError(Exception):
    """An error caused by the user's input (name, parameter, data, config).

    The CLI prints its message as one line on stderr and exits with status 2.
    """

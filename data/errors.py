"""The one exception type of the data package.

Every failure a user can fix (a missing or corrupt file, a dataset that was never fetched, a
registry client that is not installed, a pipeline asked for the wrong image shape) raises
`DataError` with a message that names the file or dataset and says what to do. It subclasses
ValueError so callers that already catch bad-input errors keep working.
"""


class DataError(ValueError):
    """A dataset is missing, corrupt, or inconsistent with what was asked for."""

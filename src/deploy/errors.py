"""The deployment scripts' user-facing error."""
from src.errors import UserError


class DeployError(UserError):
    """A mistake in the files or arguments given to a deployment script, in one line.

    A UserError, so `src.errors.run_cli` prints it as `error: <message>` and exits with
    code 2 instead of showing a traceback.
    """

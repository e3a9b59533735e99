"""The project's user-facing error type and the entry points' runner; the standard library only.

Every layer may import this module (models, data, deploy, tools, the scripts): it holds
nothing but what a one-line error report needs, so importing it pulls in neither PyYAML
nor MindSpore. ConfigError (a setting or command-line mistake) is here too, so that a script
checking its own arguments need not load the config module; each layer subclasses `UserError`
for its own mistakes (DatasetError, CheckpointError, DeployError, ...).
"""
import sys


class UserError(ValueError):
    """A mistake of the user's (config, data layout, checkpoint), reported in one line.

    Entry points run under `run_cli`, which prints it as `error: <message>` and exits 2.
    """


class ConfigError(UserError):
    """A mistake in a config file or on the command line, described in one line."""


def one_line(text):
    """`text` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def run_cli(main_fn, *args, **kwargs):
    """Run an entry point's main() and exit with its return code (None means 0).

    A UserError (ConfigError, DatasetError, CheckpointError, ...) becomes `error: <message>`
    on one stderr line and exit code 2, without a traceback: the user made a mistake, the
    program did not.
    """
    try:
        code = main_fn(*args, **kwargs)
    except UserError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in REQUIRED_PACKAGES:
            raise
        print(f"error: {missing_package_line(e.name)}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)


# import name -> requirements.txt package: what `make demo` installs into .venv
REQUIRED_PACKAGES = {"mindspore": "mindspore", "numpy": "numpy", "yaml": "pyyaml", "PIL": "pillow",
                     "matplotlib": "matplotlib"}


def missing_package_line(name):
    """The one line for a requirement this Python lacks: most often the command ran outside .venv."""
    package = REQUIRED_PACKAGES[name.split(".")[0]]
    return (f"{package} is not installed for {sys.executable}: run the command inside the project's venv "
            f"(`make demo` creates .venv; then `source .venv/bin/activate`, or call .venv/bin/python), or "
            f"pip install -r requirements.txt")

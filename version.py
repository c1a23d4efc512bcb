"""gatepack's version, in a module of its own: the package's ``__init__`` re-exports it, the build reads it
(pyproject.toml), and reports record it without importing the API (which imports the reporting)."""

__version__ = "0.2.0"

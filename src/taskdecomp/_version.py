"""The version, in one place: the package metadata reads it, and so does ``--version``."""

__version__ = "0.1.0"

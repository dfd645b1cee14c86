"""The ``commscope`` command line: one module per command family (predict, list/show, bench, emulate, fit,
import, profile, train, validate, app), the options and errors they share (:mod:`.common`), and the entry point
that assembles them (:mod:`.entry`; the ``commscope`` script is ``runners.cli:main``)."""

from .entry import app, main

__all__ = ["app", "main"]

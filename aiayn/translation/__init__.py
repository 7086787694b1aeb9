"""Translation: one request's way from text to text, the same for the command line, the Python API and the server.

The entrance is :mod:`aiayn.translation.pipeline` (a request prepared, decoded by an engine, finished) and
:mod:`aiayn.translation.route` (what translates a request: an engine and a direction, a pivot, a fallback). Around
them, what a request's text needs: :mod:`aiayn.translation.spans` (split and joined), :mod:`aiayn.translation.spans`
(protected spans), :mod:`aiayn.translation.formatstrings`, :mod:`aiayn.translation.markup` and
:mod:`aiayn.translation.htmltree` (HTML), :mod:`aiayn.translation.pipeline` (degenerate output decoded again),
:mod:`aiayn.translation.stream` (lines in chunks) and :mod:`aiayn.translation.route` (language codes).
"""

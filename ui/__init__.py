"""The browser app: one module per tab (layout and handlers side by side), shared helpers in
``ui.common``, the page in ``ui.page``, start-up in ``ui.startup``. The UI talks to ``workflows``
(from ``annotations`` and ``qpr`` it imports only the few names ``tests/test_layering.py`` allows:
the error it shows, the type and constants it displays); nothing below ever imports it."""

"""The browser app: one module per tab (layout and handlers side by side), shared helpers in
``ui.common``, the page in ``ui.page``, start-up in ``ui.startup`` and the demo corpus in
``ui.demo``. The UI calls ``annotations`` and ``qpr``; neither ever imports it."""

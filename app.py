"""The browser app (the Hugging Face Spaces entry point): search demo, spot-check annotation,
cluster review, retraining and export.

``python app.py`` serves the demo bundle (trained on ``workflows/demo_corpus.tsv`` on first start and
cached under ``QPR_CACHE_DIR``, default ``runs``); ``ui/startup.py`` lists the environment
variables that change what it serves, where judgments go and how annotators sign in. The tabs
live in the ``ui`` package, one module each; docs/ARCHITECTURE.md maps the whole project.
"""

import sys

from ui.startup import main

if __name__ == "__main__":
    sys.exit(main())

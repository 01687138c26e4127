"""Project names and their slugs: the built-in demo project's slug, and the rule that turns a
name a user typed into the folder and URL name of a project (light: no model code, so the
annotation store can name the demo project without loading the engine)."""

from __future__ import annotations

import re
import unicodedata

DEMO = "demo"  # the built-in project: the demo corpus (or QPR_BUNDLE), not kept under projects/
MAX_NAME = 60  # characters of a project's name
MAX_SLUG = 100  # characters of its slug (case folding can lengthen a name), as the store keeps it


def slug_of(name: str) -> str:
    """The folder and URL name of a project called ``name``: its letters and digits, in any
    script, case-folded (NFKC), with a dash for each run of anything else; "" when it has none."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return re.sub(r"[\W_]+", "-", folded).strip("-")

"""Whether a SQLite file is an annotation database of this version, whole and consistent: what
``annotations.backup.restore`` checks before it touches the live database.

A file can be valid SQLite and still not ours: a trigger that deletes judgments, a CHECK
constraint changed by a few bytes, a table set from elsewhere, rows its constraints forbid
(written with ``PRAGMA ignore_check_constraints`` or through ``writable_schema``). So, in order,
the first problem found is reported in one line:

- integrity: ``PRAGMA integrity_check`` (damaged pages, index entries that disagree with their
  table or repeat a unique value), and a file SQLite cannot read at all;
- revision: ``alembic_version`` holds exactly this version's head revision;
- schema: every table, index, trigger and view in ``sqlite_master`` is one the migrations make
  and is defined exactly as they define it, and none is missing. The reference is built by
  running the migrations into a new SQLite file (once per process); definitions are compared as
  SQL tokens, so whitespace, identifier quoting and keyword case do not matter but every literal
  (the labels a CHECK allows) does;
- rows: foreign keys (``PRAGMA foreign_key_check``); every NOT NULL and CHECK constraint of the
  models (``annotations.models``) evaluated on the rows (UNIQUE ones are indexes, which the
  integrity check verifies); and the judgments' history (``JUDGMENT_RULES``): a judgment out of
  force was replaced or withdrawn, and what replaced it is a later judgment of the same annotator
  on the same item.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import CheckConstraint

from annotations.db import alembic_config, make_engine, migrate
from annotations.errors import AnnotationError
from annotations.models import Base
from qpr.errors import one_line

# SQLite's own bookkeeping, which ANALYZE or AUTOINCREMENT may add to any database of ours.
SQLITE_INTERNAL = re.compile(r"sqlite_(autoindex_|stat\d|sequence$)")
TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|\w+|[^\s\w]")

# The judgments' history, as annotations.repositories.judgments writes it: (what is wrong, the rows
# that break it). is_current is 1 or NULL, never 0 (the unique constraint relies on NULL).
JUDGMENT_RULES = [
    ("is out of force but neither replaced nor withdrawn",
     "is_current IS NULL AND superseded_by IS NULL AND withdrawn_at IS NULL"),
    ("has is_current other than 1 or NULL", "is_current IS NOT NULL AND is_current IS NOT 1"),
    ("is replaced by a judgment that is not a later one of the same annotator on the same item",
     "superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM judgments AS later WHERE later.id = judgments.superseded_by "
     "AND later.id > judgments.id AND later.annotator_id = judgments.annotator_id AND later.item_key = judgments.item_key)"),
]
ANOTHER = "restore another backup, one written by `qpr-annotations backup`"


def check_backup(path: Path, name: str | Path | None = None) -> None:
    """Raise AnnotationError (one line, naming the file, what is wrong and what to do) unless the
    SQLite file at ``path`` is an annotation database of this version, whole and consistent
    (module doc). Reads only; ``name`` is how the message names the file (default: ``path``)."""
    problem, fix = None, ANOTHER
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            for step in (_damage, _revision, _schema, _foreign_keys, _constraints, _history):
                problem = step(connection)
                if problem:
                    fix = "" if step is _revision else fix  # a revision's message says what to do itself
                    break
    except sqlite3.DatabaseError as err:
        problem = f"is not an annotation database ({one_line(err)})"
    if problem:
        raise AnnotationError(f"{name or path} {problem}; nothing was changed{f': {fix}' if fix else ''}")


def _damage(connection: sqlite3.Connection) -> str | None:
    rows = connection.execute("PRAGMA integrity_check").fetchall()
    # One row per problem, a row may hold several lines, and the first may only name the database.
    found = [line.strip() for (text,) in rows for line in str(text).splitlines()
             if line.strip() and line.strip() != "ok" and not line.startswith("***")]
    if not found:
        return None
    more = f" and {len(found) - 1} more problem(s)" if len(found) > 1 else ""
    return f"fails SQLite's integrity check ({found[0]}{more})"


def _revision(connection: sqlite3.Connection) -> str | None:
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    try:
        found = [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.OperationalError:
        return f"holds no schema revision (no alembic_version table): it is not an annotation database; {ANOTHER}"
    if found == [head]:
        return None
    known = {rev.revision for rev in script.walk_revisions()}
    shown = ", ".join(map(str, found)) or "none"
    if found and set(found) <= known:
        return (f"is at schema revision {shown}, an older one than this version's {head}: open a copy of it once with "
                f"`qpr-annotations --db sqlite:///COPY stats` (that upgrades it), then restore the copy")
    return (f"has schema revision {shown}, which this version does not know (its own is {head}): restore it with the "
            f"version that wrote it, or {ANOTHER}")


@functools.lru_cache(maxsize=1)
def reference_schema() -> dict[tuple[str, str], list[str] | None]:
    """The schema the migrations make: (type, name) -> the SQL tokens of its definition."""
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'reference.db'}")
        try:
            migrate(engine)
            with engine.connect() as connection:
                return _objects(connection.connection.driver_connection)
        finally:
            engine.dispose()


def _objects(connection: sqlite3.Connection) -> dict[tuple[str, str], list[str] | None]:
    return {(kind, name.lower()): _tokens(sql) for kind, name, sql in
            connection.execute("SELECT type, name, sql FROM sqlite_master") if not SQLITE_INTERNAL.match(name)}


def _tokens(sql: str | None) -> list[str] | None:
    """``sql`` as tokens: identifiers unquoted and lower-cased, keywords lower-cased, literals as
    written; a table's columns and constraints (the items between its outer parentheses) in
    sorted order, since a migration that copies a table (Alembic's batch mode) writes its
    constraints in no fixed order, and the order means nothing to SQLite."""
    if sql is None:
        return None
    tokens = []
    for token in TOKEN.findall(sql):
        if token[0] in "\"`[" and re.fullmatch(r"\w+", token[1:-1]):
            token = token[1:-1]
        tokens.append(token if token.startswith("'") else token.lower())
    if tokens[:2] != ["create", "table"] or "(" not in tokens:
        return tokens
    start = tokens.index("(")
    items, depth, item = [], 0, []
    for token in tokens[start + 1:]:
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth < 0 or (depth == 0 and token == ","):
            items.append(item)
            item = []
            if depth < 0:
                break
        else:
            item.append(token)
    return tokens[:start + 1] + [t for listed in sorted(items) for t in [*listed, ","]] + [")"]


def _schema(connection: sqlite3.Connection) -> str | None:
    reference, found = reference_schema(), _objects(connection)
    extra = sorted(set(found) - set(reference))
    if extra:
        return f"has {', '.join(f'a {kind} {name}' for kind, name in extra[:3])} of its own, which this version never makes"
    missing = sorted(set(reference) - set(found))
    if missing:
        return (f"lacks {', '.join(f'the {kind} {name}' for kind, name in missing[:3])}"
                f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''} that this version's schema has")
    for key in sorted(reference):
        if found[key] != reference[key]:
            ours, theirs = reference[key] or [], found[key] or []
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            return (f"defines the {key[0]} {key[1]} otherwise than this version's migrations: "
                    f"{' '.join(theirs[at:at + 3]) or 'its end'!r} where they have {' '.join(ours[at:at + 3]) or 'its end'!r}")
    return None


def _foreign_keys(connection: sqlite3.Connection) -> str | None:
    broken = connection.execute("PRAGMA foreign_key_check").fetchall()
    if not broken:
        return None
    table, rowid, parent, _ = broken[0]
    return f"has {len(broken)} row(s) pointing at rows that do not exist (first: {table} row {rowid}, into {parent})"


def _constraints(connection: sqlite3.Connection) -> str | None:
    """The first NOT NULL or CHECK constraint of the models that some rows break (they may have been
    written around it), counted in one pass over each table. UNIQUE ones need no pass: SQLite keeps
    them as indexes, whose entries ``PRAGMA integrity_check`` verifies ("non-unique entry")."""
    for table in Base.metadata.sorted_tables:
        tests = [(f"{column.name} IS NULL", f"lack a {column.name}") for column in table.columns if not column.nullable]
        tests += [(f"NOT ({check.sqltext})", f"break {check.name} ({check.sqltext})")
                  for check in table.constraints if isinstance(check, CheckConstraint)]
        counts = connection.execute(f"SELECT {', '.join(f'SUM({where})' for where, _ in tests)} FROM {table.name}").fetchone()
        for count, (_, what) in zip(counts, tests):
            if count:
                return f"has {count} row(s) in {table.name} that {what}"
    return None


def _history(connection: sqlite3.Connection) -> str | None:
    for what, where in JUDGMENT_RULES:
        first = connection.execute(f"SELECT id, COUNT(*) OVER () FROM judgments WHERE {where} ORDER BY id LIMIT 1").fetchone()
        if first:
            return f"has {first[1]} judgment(s) whose history is inconsistent: judgment {first[0]} {what}"
    return None

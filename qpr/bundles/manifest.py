"""What a bundle folder is, read before its contents are: the manifest (``Manifest``, the one
reader and writer of ``manifest.json``) checked for every field a load uses, the files its system
holds (``qpr.systems.registry``), and whether a path may be written as a bundle (``is_bundle``,
``check_target``). ``qpr.bundles.bundle`` loads the rest.

A ``Manifest`` is frozen: a bundle that records something new gets a new one (``dataclasses.replace``,
``Bundle.with_manifest``), so two bundles may share one and neither changes the other's. Its
objects and arrays are frozen too (``ReadOnlyDict``, ``ReadOnlyList``: a dict and a list that refuse
every change in place), so ``manifest.metrics["val"] = ...`` raises instead of changing every bundle
that shares the manifest; a new entry is a new value (``manifest.metrics | {...}`` is a plain dict)
handed to ``replace``. Keys this version does not know (a newer version's) are kept in ``extra``
and written back as they were read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from qpr.data.corpus_file import CORPUS_FILE, PARQUET_CORPUS_FILE
from qpr.errors import QPRError, one_line
from qpr.fsutil.atomic import atomic_path, check_writable
from qpr.fsutil.leftovers import recover
from qpr.systems.question_encoder import REBUILD
from qpr.systems.registry import DEFAULT, REGISTRY, system_named

FORMAT_VERSION = 1
LEXICAL = "bm25"  # the system of a lexical bundle
LEXICAL_FILES = ("manifest.json", CORPUS_FILE)
# A file every bundle holds -> the names older bundles hold in its place, which ``load`` still reads
# (a system adds its own: ``System.legacy``).
LEGACY_FILES = {CORPUS_FILE: (PARQUET_CORPUS_FILE,)}
# What the manifest of a bundle with an encoder must hold, and the JSON types: everything ``load``
# reads from it, with what its system reads besides (``System.manifest_fields``).
MANIFEST_FILE = "manifest.json"
MANIFEST_FIELDS = {"format_version": int, "version": str, "encoder_config": dict, "index": dict, "data_fingerprint": str}
LEXICAL_FIELDS = {"format_version": int, "version": str, "data_fingerprint": str}
# An entry's old name -> the field that holds it now (``Manifest.from_json``).
LEGACY_KEYS = {"labels": "provenance"}
INDEX_FIELDS = {"factory": str}  # search parameters (or, in older bundles, nprobe and ef_search) are checked by VectorIndex.load
CARD_FILES = ("README.md", "config.json")  # the model card and config a bundle carries for the Hub (bundles/card.py)
BM25_FOLDER = "bm25"  # the BM25 index of the corpus, saved so that a large corpus is not re-indexed at every start
TEACHER_FILE = "teacher.npy"  # an asymmetric bundle's teacher vectors of the corpus (qpr.bundles.bundle)
# Every name a bundle folder may hold: the files of every system (a model folder by its top name),
# those older bundles hold in their place, the card and the BM25 index.
ENTRIES = (frozenset(LEXICAL_FILES) | set(CARD_FILES) | {BM25_FOLDER, TEACHER_FILE} | {name.split("/")[0] for system in REGISTRY.values() for name in system.files}
           | {old for legacy in (LEGACY_FILES, *(system.legacy for system in REGISTRY.values())) for names in legacy.values()
              for old in names})


def _refuse(self, *args, **kwargs):
    raise TypeError(f"a manifest's {type(self).__name__} cannot be changed in place; build a new value and "
                    "replace the manifest (dataclasses.replace, Bundle.with_manifest)")


class ReadOnlyDict(dict):
    """A JSON object of a manifest: a dict (equal to, serialised and merged with ``|`` as one: the
    merge is a plain dict) whose every change in place raises TypeError."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):  # copied and pickled by its contents, not by item assignment
        return type(self), (dict(self),)


class ReadOnlyList(list):
    """A JSON array of a manifest: a list whose every change in place raises TypeError."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = reverse = sort = _refuse

    def __reduce__(self):
        return type(self), (list(self),)


def read_only(value: Any) -> Any:
    """``value`` with every dict and list in it, at any depth, a ``ReadOnlyDict`` / ``ReadOnlyList``."""
    if isinstance(value, dict):
        return ReadOnlyDict({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(read_only(item) for item in value)
    if isinstance(value, tuple):
        return tuple(read_only(item) for item in value)
    return value


def plain(value: Any) -> Any:
    """``value`` with every dict and list in it, at any depth, a plain (changeable) copy."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    return value


@dataclass(frozen=True)
class Manifest:
    """A bundle's ``manifest.json``, typed (module doc). Optional entries are None where a bundle
    has none, and are then left out of the file."""

    version: str  # creation time + a digest of the weights (or, lexical, of the corpus): what judgments refer to
    data_fingerprint: str  # the corpus' content fingerprint (``qpr.data.corpus.fingerprint``)
    format_version: int = FORMAT_VERSION
    created: str | None = None  # ISO time of creation
    system: str | None = None  # the encoder's system (``qpr.systems.registry``); None: a CNN older than the field
    lexical: bool = False  # a corpus with no encoder yet, served by BM25 alone
    data: str | None = None  # the data the bundle was made from, named for people
    corpus_size: int | None = None
    corpus_sha256: str | None = None  # the corpus file's hash, recorded as the bundle is saved
    index: dict | None = None  # the vector index's settings, size and width (``VectorIndex.settings``)
    encoder_config: dict | None = None  # what the system's ``load`` rebuilds the encoder from
    text_config: dict | None = None  # a QuestionEncoder's tokenizer settings
    vocab_rows: int | None = None  # a QuestionEncoder's embedding rows
    training: dict = field(default_factory=dict)  # the run that trained the encoder (its system's summary)
    metrics: dict = field(default_factory=dict)  # split -> the encoder's scores alone
    hybrid_metrics: dict | None = None  # split -> the served hybrid's scores
    fusion: dict | None = None  # the fitted hybrid scorer or rank fusion (``qpr.retrieval.hybrid``)
    fusion_skipped: str | None = None  # why training fitted no hybrid
    fusion_choice: dict | None = None  # how a project from a general encoder chose its fusion
    provenance: dict | None = None  # what the encoder learned from: the export (and judgment ids) of a retrained bundle
    asymmetric: dict | None = None  # an asymmetric bundle's teacher and its weight
    general: dict | None = None  # a project made from a general encoder: which, and how adapted
    domain_metrics: dict | None = None  # a general encoder's scores per domain
    card: dict | None = None  # what the model card says besides the manifest (``Bundle.with_card``)
    added_questions: int | None = None  # questions added since the index was built (``Bundle.with_questions``)
    extra: dict = field(default_factory=dict)  # keys this version does not know, kept as read

    def __post_init__(self) -> None:
        # Every object and array read-only (module doc), whoever built the manifest.
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (dict, list, tuple)):
                object.__setattr__(self, f.name, read_only(value))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Manifest":
        """The manifest a JSON object holds (checked by ``load`` first). A bundle saved before the
        provenance had its name holds it as ``labels`` (``LEGACY_KEYS``): read as ``provenance``,
        and written back under that name only."""
        data = {(LEGACY_KEYS[key] if key in LEGACY_KEYS and LEGACY_KEYS[key] not in data else key): value
                for key, value in data.items()}
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{key: value for key, value in data.items() if key in known},
                   extra={key: value for key, value in data.items() if key not in known})

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this manifest: every entry that is set, then the unknown ones as read
        (plain dicts and lists: the caller's to change)."""
        entries = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return plain({key: value for key, value in entries.items()
                      if value is not None and not (key == "lexical" and not value)} | self.extra)

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        """The manifest of the bundle folder ``path``, checked for every field ``Bundle.load`` uses."""
        return cls.from_json(_checked(path))

    def save(self, folder: Path) -> None:
        """Write this manifest into the bundle folder ``folder``, atomically."""
        with atomic_path(folder / MANIFEST_FILE) as tmp:
            tmp.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")


def _raw(path: Path) -> Any:
    """The JSON value in the bundle folder ``path``'s manifest file, unchecked."""
    return json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))


def manifest_system(path: Path) -> str:
    """The manifest's ``system`` (``LEXICAL`` for a lexical bundle, the CNN when it has none), read
    before its files are checked; an unreadable manifest is left for ``Manifest.load`` to name."""
    try:
        manifest = _raw(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return DEFAULT
    if isinstance(manifest, dict) and manifest.get("lexical") is True:
        return LEXICAL
    system = manifest.get("system") if isinstance(manifest, dict) else None
    return system if isinstance(system, str) else DEFAULT


def _checked(path: Path) -> dict:
    """The manifest object of the bundle folder ``path``, checked for every field ``load`` uses."""
    try:
        manifest = _raw(path)
    except (ValueError, UnicodeDecodeError) as err:
        raise QPRError(f"{path}/manifest.json is not valid JSON ({one_line(err)}); {REBUILD}") from err
    except OSError as err:
        raise QPRError(f"{path}/manifest.json cannot be read: {err.strerror or err}") from err
    if not isinstance(manifest, dict):
        raise QPRError(f"{path}/manifest.json holds a JSON {type(manifest).__name__}, not an object; {REBUILD}")
    if "format_version" in manifest and manifest["format_version"] != FORMAT_VERSION:
        raise QPRError(
            f"{path}: bundle format {manifest.get('format_version')!r}, this version reads {FORMAT_VERSION}; "
            "rebuild it with `python -m qpr train`"
        )
    if manifest.get("lexical") is True:
        checks = [(LEXICAL_FIELDS, manifest)]
    else:
        system = manifest.get("system", DEFAULT)
        # A system that is no name is reported as a field of the wrong type, below.
        own = system_named(system, f"{path}/manifest.json: ").manifest_fields if isinstance(system, str) else {"system": str}
        checks = [(MANIFEST_FIELDS | own, manifest), (INDEX_FIELDS, manifest.get("index"))]
    for required, where in checks:
        if not isinstance(where, dict):
            break
        missing = [name for name in required if name not in where]
        if missing:
            prefix = "" if where is manifest else "index."
            raise QPRError(f"{path}/manifest.json lacks {', '.join(prefix + m for m in missing)}; {REBUILD}")
        wrong = [name for name, kind in required.items()
                 if not isinstance(where[name], kind) or (kind is int and isinstance(where[name], bool))]
        if wrong:
            prefix = "" if where is manifest else "index."
            raise QPRError(f"{path}/manifest.json: {', '.join(prefix + w for w in wrong)} has the wrong type "
                           f"(expected {', '.join(required[w].__name__ for w in wrong)}); {REBUILD}")
    return manifest


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a folder this package wrote as a bundle: a manifest object with a format
    version and a version, and no entries other than a bundle's files (``ENTRIES``)."""
    path = Path(path)
    try:
        entries = set(os.listdir(path))
        manifest = _raw(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(manifest, dict) and {"format_version", "version"} <= manifest.keys() and entries <= ENTRIES


def check_target(path: str | Path) -> None:
    """Refuse a bundle destination that is neither new nor a bundle, before anything is written.

    A new path (or an empty folder) and an existing bundle may be written; an existing file, a
    folder holding anything else, or a symbolic link is refused with QPRError, and so is a folder
    that cannot be written. Nothing that is not a bundle is ever moved or replaced.
    """
    path = Path(path)
    if path.is_symlink():
        raise QPRError(f"{path} is a symbolic link; give the bundle folder it points to, or a new path "
                       "(nothing was changed)")
    if not path.exists():
        recover(path, wait=0)  # a bundle whose swap was interrupted is still a bundle
    if not path.exists():
        check_writable(path)
        return
    if not path.is_dir():
        raise QPRError(f"{path} is an existing file, not a bundle; choose a new path for the bundle (nothing was changed)")
    try:
        entries = sorted(os.listdir(path))
    except OSError as err:
        raise QPRError(f"{path} cannot be read ({err.strerror or err}); choose another path") from err
    if entries and not is_bundle(path):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise QPRError(f"{path} is an existing folder that is not a bundle (it holds {shown}); choose a new path, or "
                       "move that folder away yourself (nothing was changed)")
    check_writable(path)

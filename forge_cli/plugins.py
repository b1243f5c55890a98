"""The one plugin pattern of forge's extension points: a registry of classes by name.

An extension point (tool sessions, trainer backends, ...) defines a base class and one :class:`Registry`; a plugin
is a subclass that names itself on definition (``class Mine(Base, kind="mine")``, the base's ``__init_subclass__``
calls :meth:`Registry.add`). A lookup by name finds, in this order:

1. a class already registered;
2. forge's own plugins, by where they live: the modules matching ``own`` (a glob under the ``forge_cli`` package,
   e.g. ``"*/tool_session.py"``), imported on the first lookup that misses: no central list to edit, and found
   in a source checkout without installed metadata (the module named like the plugin first, where ``own`` names
   modules by plugin: ``"harness/installers/*.py"`` and ``npm`` import ``harness/installers/npm.py`` alone);
3. the entry points of group ``group`` that installed packages declare (``[project.entry-points."<group>"]`` in
   their ``pyproject.toml``: ``name = "pkg.module:Class"``);
4. a dotted path ``pkg.module:Class`` given as the name (a user's own, not installed as a package).

A name that none of these gives is a ``ValueError`` naming every registered one. A plugin that fails to import is
left out of the list (its error is kept and shown when it is asked for by name), so one broken plugin never hides
the others. A leaf module: it imports nothing of forge.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

_PACKAGE = Path(__file__).resolve().parent


class Registry(Generic[T]):
    """Plugins of one extension point: ``what`` (for messages, e.g. "tool session"), their base class ``base``
    (None: plugins are functions), the entry-point group ``group`` and the glob ``own`` of forge's own plugin
    modules (relative to forge_cli)."""

    def __init__(self, what: str, base: type | None, group: str, own: str = "", instances: bool = False) -> None:
        self.what, self.base, self.group, self.own, self.instances = what, base, group, own, instances
        # how many plugins were added so far: a caller that derives tables from the registry rebuilds them on change
        self.version = 0
        self._classes: dict[str, T] = {}
        self._errors: dict[str, str] = {}
        self._loaded = False
        self._own_loaded = False
        # lookups come from several threads at once (the tool server registers rollouts in parallel): the first
        # loads, the others wait for it; re-entrant, as a plugin module's import may look a name up itself
        self._lock = threading.RLock()

    def add(self, name: str, cls: T) -> None:
        """Register ``cls`` as ``name`` (the base's ``__init_subclass__`` calls this); a later class of the same
        name replaces the earlier one (a module imported again, a test's redefinition)."""
        self._classes[name] = cls
        self.version += 1

    def registered(self, name: str) -> T | None:
        """The plugin registered as ``name`` now, without loading anything (None: none)."""
        return self._classes.get(name)

    def remove(self, name: str) -> None:
        """Unregister ``name`` (a test's own plugin, after the test)."""
        self._classes.pop(name, None)
        self.version += 1

    def load_all(self) -> None:
        """Import forge's own plugin modules and load the group's entry points (once; a failure is kept by name)."""
        with self._lock:
            self._load_own()
            if not self._loaded:
                self._loaded = True
                self._load_entry_points()

    def _load_own(self) -> None:
        """forge's own plugin modules (once): a name found there needs no scan of the installed distributions'
        entry points (tens of milliseconds on every command's start otherwise)."""
        if self._own_loaded:
            return
        self._own_loaded = True
        if self.own:
            for path in sorted(_PACKAGE.glob(self.own)):
                if path.name.startswith("_"):
                    continue  # a package's __init__ (imported with the package) or a private module
                parts = path.relative_to(_PACKAGE).with_suffix("").parts
                module = ".".join(("forge_cli", *parts))
                try:
                    importlib.import_module(module)
                except Exception as exc:  # an optional dependency missing: that plugin only is unavailable
                    self._errors[module] = f"{type(exc).__name__}: {exc}"

    def _load_named(self, name: str) -> None:
        """The one own module named like the plugin (``own`` ``"harness/installers/*.py"`` and name ``npm``:
        ``harness/installers/npm.py``), imported before all the others: a command that looks up one plugin does
        not pay for importing every one (and their dependencies). A module that registers other names, or none,
        is only imported early; the full import of ``own`` still follows when the name is not found."""
        # a module's name is a file name: at most 255 bytes (a longer name is no plugin of forge's, and is_file would
        # raise "File name too long")
        if self._own_loaded or not self.own.endswith("*.py") or not name.isidentifier() or len(name) > 200:
            return
        path = _PACKAGE / self.own.replace("*", name)
        if not path.is_file() or "*" in str(path.relative_to(_PACKAGE).parent):
            return
        module = ".".join(("forge_cli", *path.relative_to(_PACKAGE).with_suffix("").parts))
        try:
            importlib.import_module(module)
        except Exception as exc:  # its error is kept by module, as _load_own keeps it
            self._errors[module] = f"{type(exc).__name__}: {exc}"

    def _load_entry_points(self) -> None:
        for point in entry_points(group=self.group):
            if point.name in self._classes:
                continue
            try:
                loaded = point.load()
            except Exception as exc:
                self._errors[point.name] = f"{type(exc).__name__}: {exc}"
                continue
            if self._accepts(loaded) and point.name not in self._classes:
                self.add(point.name, loaded)

    def get(self, name: str) -> T:
        """The class registered as ``name`` (see the module docstring for where it is looked for)."""
        if name not in self._classes:
            with self._lock:
                self._load_named(name)
                if name not in self._classes:
                    self._load_own()
        if name not in self._classes:
            self.load_all()
        if name in self._classes:
            return self._classes[name]
        if ":" in name:
            return self._dotted(name)
        why = self._errors.get(name) or "; ".join(f"{where} failed to load: {error}" for where, error in
                                                  self._errors.items())
        own = "pkg.module:function" if self.base is None else "pkg.module:NAME" if self.instances else \
            "pkg.module:Class"
        raise ValueError(f"unknown {self.what} {name!r}" + (f" ({why})" if why else "")
                         + f" (registered: {', '.join(self.names()) or 'none'}; a package adds one through the "
                         f"entry-point group {self.group!r}, or give your own as {own})")

    def names(self) -> list[str]:
        """Every registered name, sorted (forge's own and installed packages' included)."""
        self.load_all()
        return sorted(self._classes)

    def items(self) -> list[tuple[str, T]]:
        """Every registered (name, plugin), sorted by name."""
        self.load_all()
        return sorted(self._classes.items(), key=lambda item: item[0])

    def __contains__(self, name: object) -> bool:
        if name not in self._classes:
            with self._lock:
                if isinstance(name, str):
                    self._load_named(name)
                if name not in self._classes:
                    self._load_own()
        if name not in self._classes:
            self.load_all()
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _dotted(self, name: str) -> T:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # the user's module: any error importing it is a configuration problem
            raise ValueError(f"cannot import {self.what} {name!r} ({type(exc).__name__}: {exc})") from None
        if self._accepts(obj):
            return obj
        what = "a function" if self.base is None else f"a {self.base.__name__}" if self.instances else \
            f"a subclass of {self.base.__name__}"
        raise ValueError(f"{name!r} is not a {self.what} ({what})")

    def _accepts(self, obj: object) -> bool:
        if self.base is None:
            return callable(obj)
        if self.instances:
            return isinstance(obj, self.base)
        return isinstance(obj, type) and issubclass(obj, self.base)

"""OR-Tools' CP-SAT module, loaded without pandas.

`ortools.sat.python.cp_model` imports pandas at load for its `*_series` methods only (pd.Index and pd.Series),
which the solver never calls: more than a second of a command's start-up. After `install()` the module is
imported with stand-ins for those two classes: they import pandas when called, and nothing is an instance of
them until pandas is loaded, so every method still works, pandas or not.

If a newer OR-Tools needs more of pandas at load, the stand-ins refuse, and the module is imported as usual.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from importlib.machinery import ModuleSpec

CP_MODEL = "ortools.sat.python.cp_model"


class _StandInError(ImportError):
    """OR-Tools used more of pandas while loading than the stand-ins give."""


class _PandasClass(type):
    """Stands for `pandas.<name>`, resolved only when pandas is needed."""

    def real(cls) -> type:
        if sys.modules.get("pandas") is _STAND_IN:
            raise _StandInError(f"OR-Tools uses pandas.{cls.__name__} while loading")
        return getattr(importlib.import_module("pandas"), cls.__name__)

    def __instancecheck__(cls, obj: object) -> bool:
        # Nothing is a pandas object while pandas has not been imported: no need to import it to say so.
        pandas = sys.modules.get("pandas")
        return pandas is not None and pandas is not _STAND_IN and isinstance(obj, cls.real())

    def __call__(cls, *args, **kwargs):
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str):
        if name.startswith("__"):  # what typing and inspect probe for: a plain class has none
            raise AttributeError(name)
        return getattr(cls.real(), name)


class _PandasStandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if sys.modules.get("pandas") is self:
            raise _StandInError(f"OR-Tools uses pandas.{name} while loading")
        return getattr(importlib.import_module("pandas"), name)


_STAND_IN = _PandasStandIn("pandas")
_STAND_IN.Index = _PandasClass("Index", (), {})  # type: ignore[attr-defined]
_STAND_IN.Series = _PandasClass("Series", (), {})  # type: ignore[attr-defined]


class _WithoutPandas(importlib.abc.Loader):
    """Runs a module's own loader with the stand-in as `pandas`; again with pandas if the stand-in falls short."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        before = set(sys.modules)
        sys.modules["pandas"] = _STAND_IN
        try:
            self.loader.exec_module(module)
        except _StandInError:
            for name in set(sys.modules) - before:  # what it half-loaded, then the usual import
                if name != module.__name__:
                    del sys.modules[name]
            self.loader.exec_module(module)
        finally:
            if sys.modules.get("pandas") is _STAND_IN:
                del sys.modules["pandas"]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path, target=None) -> ModuleSpec | None:
        if fullname != self.name or "pandas" in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _WithoutPandas(spec.loader)
        return spec


def install(name: str = CP_MODEL) -> None:
    """From now on, the module `name` (OR-Tools' CP-SAT module) is imported without pandas where it can be: when
    the solver is first used, so that a command rejecting bad input still does not load OR-Tools at all."""
    if not any(isinstance(f, _Finder) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(name))

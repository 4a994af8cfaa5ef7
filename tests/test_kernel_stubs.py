"""Every compiled kernel (broker/kernels/*.so) has a type stub (.pyi) that names exactly its public API.

The stubs are written by hand from pyx/*.pyx, so nothing else notices when a kernel gains, loses or
renames something. This compares each stub, parsed with `ast`, with the imported module:

Module level. The module's public names are the names in dir(module) that do not start with "_"
and whose value is not a module. That drops module dunders (__pyx_capi__, __test__, ...), private
helpers (client_codec's loop variables _name and _v) and imported modules (np, os, sys, mmap,
socket, zlib): implementation details nobody should reach through a kernel. A non-module value a
kernel imports *is* public (ha.reallocate_byte_buffer re-exports remoting.reallocate) and needs a
stub entry. The stub's public names are those (not starting with "_") that it declares at top
level with `def`, `class`, an annotated assignment (`X: Final[int]`), or an explicit re-export
(`from m import x as x`); its other imports (typing, WriteBuffer, ...) are for the type checker
only. An unannotated assignment (`Field = tuple[...]`) is a type alias, which exists only in the
stub, so it is not compared, but it may not take a runtime name (it would hide a missing entry).
The two sets must be equal, and each name must be of the same kind: a class at runtime a `class`
in the stub, a function a `def` (or a re-export), any other value an annotated assignment.

Classes. A class's public names are those of dir(cls) that do not start with "_" and are not
inherited, i.e. not in dir() of any of its bases (object for a cdef class; ValueError for the
kernels' exceptions, whose add_note, args and with_traceback belong to Python). Instances of a
Python-level class (the exceptions: cls.__dictoffset__ != 0) also have the attributes __init__
sets, which dir(cls) cannot show: an instance is made, passing 0 for each required argument, and
its public vars() are added. The stub's public names of a class are its `def`s (properties
included) and annotated or plain assignments in the class body. Dunders are not compared on either
side: dir() cannot show them faithfully (a cdef class's __cinit__ surfaces as object's __init__,
PEP 688's __buffer__ is absent on 3.11, Cython adds __setstate__ and __pyx_vtable__).
"""
from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import pytest

import broker.kernels

# The stubs live beside the package's source; the compiled modules may also come from an
# instrumented build dir (BROKER_KERNELS_DIR, searched first): a kernel is any .so on the path.
STUB_DIR = Path(broker.kernels.__file__).resolve().parent
KERNELS = sorted({p.name.split(".", 1)[0] for d in broker.kernels.__path__ for p in Path(d).glob("*.so")})


def test_kernels_found():
    assert KERNELS, f"no compiled kernels under {list(broker.kernels.__path__)}"


def test_no_stub_without_a_kernel():
    orphans = sorted(p.stem for p in STUB_DIR.glob("*.pyi") if p.stem not in KERNELS)
    assert not orphans, f"stubs of no compiled kernel: {orphans}"


def _public(name: str) -> bool:
    return not name.startswith("_")


def _runtime_kind(value: object) -> str:
    if isinstance(value, type):
        return "class"
    return "function" if callable(value) else "value"


def _runtime_names(mod: types.ModuleType) -> dict[str, str]:
    """Public name -> kind ("class", "function", "value") of the imported kernel."""
    out = {}
    for name in dir(mod):
        value = getattr(mod, name)
        if _public(name) and not isinstance(value, types.ModuleType):
            out[name] = _runtime_kind(value)
    return out


def _assigned_names(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _stub_names(tree: ast.Module) -> tuple[dict[str, str], dict[str, ast.ClassDef], set[str]]:
    """The stub's public top-level names -> kind ("class", "function", "value", "reexport"), its
    classes, and its public type aliases (unannotated assignments)."""
    names: dict[str, str] = {}
    classes: dict[str, ast.ClassDef] = {}
    aliases: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
            classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function"
        elif isinstance(node, ast.AnnAssign):
            names.update(dict.fromkeys(_assigned_names(node), "value"))
        elif isinstance(node, ast.Assign):
            aliases.update(_assigned_names(node))
        elif isinstance(node, ast.ImportFrom):
            names.update({a.name: "reexport" for a in node.names if a.asname == a.name})
    return ({n: k for n, k in names.items() if _public(n)}, {n: c for n, c in classes.items() if _public(n)},
            {n for n in aliases if _public(n)})


def _stub_members(cls: ast.ClassDef) -> set[str]:
    out = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            out.update(_assigned_names(node))
    return {n for n in out if _public(n)}


def _instance_attributes(cls: type) -> set[str]:
    """Attributes __init__ sets on an instance of a Python-level class (none for a cdef class)."""
    if not cls.__dictoffset__:
        return set()
    try:
        params = list(inspect.signature(cls).parameters.values())
    except ValueError:  # BaseException's own __init__: no signature, takes anything
        params = []
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return {n for n in vars(cls(*[0] * len(required))) if _public(n)}


def _runtime_members(cls: type) -> set[str]:
    inherited = set().union(*(dir(b) for b in cls.__bases__))
    return {n for n in dir(cls) if _public(n) and n not in inherited} | _instance_attributes(cls)


@pytest.mark.parametrize("name", KERNELS)
def test_stub_matches_kernel(name):
    stub = STUB_DIR / f"{name}.pyi"
    assert stub.is_file(), f"broker.kernels.{name} is compiled but has no stub {stub.relative_to(STUB_DIR.parents[1])}"
    mod = importlib.import_module(f"broker.kernels.{name}")
    runtime = _runtime_names(mod)
    declared, classes, aliases = _stub_names(ast.parse(stub.read_text(), str(stub)))

    shadowing = sorted(aliases & runtime.keys())
    assert not shadowing, f"{stub.name}: {shadowing} declared as type aliases, but they are runtime names"
    missing, extra = sorted(runtime.keys() - declared.keys()), sorted(declared.keys() - runtime.keys())
    assert not missing and not extra, f"{stub.name}: missing {missing}, not in the kernel {extra}"
    wrong_kind = {n: (declared[n], k) for n, k in runtime.items() if declared[n] not in (k, "reexport")}
    assert not wrong_kind, f"{stub.name}: (stub, runtime) kinds differ: {wrong_kind}"

    for cname, node in classes.items():
        cls = getattr(mod, cname)
        want, have = _runtime_members(cls), _stub_members(node)
        missing, extra = sorted(want - have), sorted(have - want)
        assert not missing and not extra, f"{stub.name}: class {cname}: missing {missing}, not in the kernel {extra}"

"""One typed model interface (pipeline.model.interface.LanguageModel): both implementations declare
every member, the handle forwards nothing it does not declare, and the stages use only its members."""
import ast
import dataclasses
import inspect
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from kit.paths import source_tree

from pipeline.model.handle import ModelHandle
from pipeline.model.interface import LanguageModel

ROOT = Path(__file__).resolve().parents[3]
MEMBERS = {"name", "tokenizer", "dims", "config", "model", "device", "lock", "calls",
           "forward", "forward_chunked", "count_pass"}
METHODS = {"forward", "forward_chunked", "count_pass"}


def protocol_members() -> set[str]:
    return {n for n in vars(LanguageModel) if not n.startswith("_")}


def test_the_protocol_declares_what_the_stages_need():
    assert protocol_members() == MEMBERS
    assert {n for n in MEMBERS if inspect.isfunction(vars(LanguageModel)[n])} == METHODS


def declared(cls, name: str) -> bool:
    """`name` is on the class itself (a property, a method, a class attribute) or a dataclass field."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    try:
        inspect.getattr_static(cls, name)
        return True
    except AttributeError:
        return name in fields


def same_parameters(impl, proto) -> bool:
    """Same parameter names, kinds and defaults (annotations aside) as the protocol's method."""
    def params(f):
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
    return params(impl) == params(proto)


@pytest.mark.parametrize("cls_path", ["pipeline.model.loader.LoadedModel", "pipeline.model.handle.ModelHandle"])
def test_each_implementation_declares_every_member_with_the_protocols_signature(cls_path):
    """Checked on the classes, so nothing loads (isinstance on a handle would read each property)."""
    import importlib

    module, name = cls_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert [m for m in sorted(MEMBERS) if not declared(cls, m)] == []
    for m in METHODS:
        assert same_parameters(getattr(cls, m), getattr(LanguageModel, m)), (cls_path, m)


def fake_loaded():
    """Stands in for the LoadedModel the handle would build (no network in the fast tier)."""
    seen = []
    loaded = SimpleNamespace(dims="dims", config="config", model="model", device="cpu", lock=threading.RLock(),
                             calls=7, tokenizer="tok",
                             forward=lambda ids, **kw: seen.append(("forward", ids, kw)) or "out",
                             forward_chunked=lambda ids, kv=None: seen.append(("chunked", ids, kv)) or ("lg", kv),
                             count_pass=lambda: seen.append(("count",)))
    return loaded, seen


def test_the_handle_answers_declared_members_from_the_loaded_model_and_nothing_else(monkeypatch):
    """An unknown name raises AttributeError without loading the network (the old __getattr__ loaded
    it for any public name, typos included, then asked the loaded model)."""
    loaded, seen = fake_loaded()
    loads = []
    monkeypatch.setattr(ModelHandle, "loaded", lambda self: loads.append(1) or loaded)
    handle = ModelHandle()
    assert "__getattr__" not in vars(ModelHandle)
    with pytest.raises(AttributeError):
        handle.no_such_member  # noqa: B018
    with pytest.raises(AttributeError):
        handle.forward_chunk  # noqa: B018 - a typo of forward_chunked
    assert loads == []
    assert (handle.dims, handle.config, handle.model, handle.device, handle.lock, handle.calls) == \
           ("dims", "config", "model", "cpu", loaded.lock, 7)
    assert handle.forward([[1, 2]], cache="c", logits_to_keep=0, output_hidden_states=True) == "out"
    assert handle.forward_chunked([1, 2, 3], "kv") == ("lg", "kv")
    handle.count_pass()
    assert seen == [("forward", [[1, 2]], dict(cache="c", use_cache=True, logits_to_keep=0, attention="sdpa",
                                               output_hidden_states=True)),
                    ("chunked", [1, 2, 3], "kv"), ("count",)]


def attributes_read(tree: ast.AST, receivers: set[str]) -> set[tuple[str, int]]:
    """(name, line) of every `lm.<name>` / `self.lm.<name>` (receivers: the variable names)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            v = node.value
            if ((isinstance(v, ast.Name) and v.id in receivers)
                    or (isinstance(v, ast.Attribute) and v.attr in receivers)):
                found.add((node.attr, node.lineno))
    return found


def test_the_stages_use_only_protocol_members():
    """Every `lm.<name>` under pipeline/ (the handle's own module aside) is a LanguageModel member, so
    a second implementation of the protocol runs every stage."""
    stray = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path.name in ("handle.py", "interface.py"):
            continue
        for name, line in attributes_read(source_tree(path), {"lm"}):
            if name not in MEMBERS:
                stray.append(f"{path.relative_to(ROOT)}:{line} lm.{name}")
    assert stray == []


def test_the_pages_use_only_what_the_handle_declares():
    """The pages hold a ModelHandle (`lm = get_model()`): what they read from it is declared on it,
    so dropping the forwarding broke no page."""
    stray, reads = [], 0
    for path in [ROOT / "app.py", *sorted((ROOT / "views").rglob("*.py"))]:
        tree = source_tree(path)
        found = attributes_read(tree, {"lm", "handle"})
        found |= {(n.attr, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "get_model"}
        reads += len(found)
        stray += [f"{path.name}:{line} .{name}" for name, line in found if not declared(ModelHandle, name)]
    assert reads > 10 and stray == []


def test_every_lm_parameter_is_annotated_language_model():
    """`lm: LanguageModel` (or `LanguageModel | None`) on every function under pipeline/ and views/."""
    bare, seen = [], 0
    for path in [*sorted((ROOT / "pipeline").rglob("*.py")), *sorted((ROOT / "views").rglob("*.py"))]:
        for node in ast.walk(source_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if a.arg == "lm":
                        seen += 1
                        note = ast.unparse(a.annotation) if getattr(a, "annotation", None) else ""
                        if note not in ("LanguageModel", "LanguageModel | None"):
                            bare.append(f"{path.relative_to(ROOT)}:{node.lineno} lm: {note or '(none)'}")
    assert seen > 30 and bare == []


@pytest.mark.model
def test_a_loaded_model_and_a_handle_are_language_models(lm):
    handle = ModelHandle()
    assert isinstance(lm, LanguageModel) and isinstance(handle, LanguageModel)
    assert handle.loaded() is lm and handle.model is lm.model and handle.lock is lm.lock
    assert not isinstance(SimpleNamespace(name="x", tokenizer=None), LanguageModel)

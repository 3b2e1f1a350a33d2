"""STYLE keeps every class of the shipped code at 20 public methods at most: a larger one is
split by what its methods are about, and each caller is handed the part it uses.

A public method is a function defined in the class body whose name does not start with ``_``
(dunder methods are the language's protocol, not the class's interface). Properties count: a
caller reaches them like methods, and turning a method into a property must not make a class
smaller. Each name counts once, so a property's setter and an ``@overload`` stack are one
method. Inherited methods count in the class that defines them; a nested class is measured on
its own. The generated gRPC stubs are not written by hand and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]
LIMIT = 20
#: classes still over the limit, with their count today: a split removes its entry, and the
#: test fails when a count grows or an entry is left behind after its class has shrunk
OVER_TODAY: dict[str, int] = {}


def public_methods(cls: ast.ClassDef) -> set[str]:
    """The names of the public functions defined in the body of ``cls``."""
    return {
        node.name
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
    }


def class_sizes(source: str) -> dict[str, int]:
    """Each class of ``source`` (nested ones by their dotted name) and its public methods."""
    sizes: dict[str, int] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = f"{prefix}{node.name}"
                sizes[name] = len(public_methods(node))
                visit(node.body, f"{name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.If | ast.Try):  # `if TYPE_CHECKING:` and the like
                visit([*node.body, *node.orelse], prefix)

    visit(ast.parse(source).body, "")
    return sizes


def test_the_count_follows_the_rules_the_docstring_gives():
    source = """
class Outer:
    x = 1
    def a(self): ...
    async def b(self): ...
    def _private(self): ...
    def __len__(self): ...
    @property
    def c(self): ...
    @c.setter
    def c(self, value): ...
    @staticmethod
    def d(): ...
    class Inner:
        def e(self): ...
if True:
    class Guarded(Outer):
        def f(self): ...
def build():
    class Local:
        def g(self): ...
"""
    assert class_sizes(source) == {
        "Outer": 4,
        "Outer.Inner": 1,
        "Guarded": 1,
        "build.<locals>.Local": 1,
    }


def test_no_class_has_more_public_methods_than_the_style_allows():
    modules = [
        path
        for source in SOURCES
        for path in source.rglob("*.py")
        if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    ]
    assert len(modules) > 100, "the sources were found"
    sizes = {
        f"{path.relative_to(ROOT)}:{name}": count
        for path in modules
        for name, count in class_sizes(path.read_text()).items()
    }
    assert len(sizes) > 100, "the classes were found"
    large = {name: count for name, count in sizes.items() if count > LIMIT}
    assert large == OVER_TODAY, (
        f"classes over {LIMIT} public methods: {large} (split them by what they do; "
        f"a class known to be over, {OVER_TODAY}, may shrink but not grow: update the figure)"
    )

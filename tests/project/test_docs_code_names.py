"""What the docs and docstrings say about the code stays true (fast tier):

- every code name docs/life-of-a-request.md gives a reader to grep (`run_for_page()`, `RunQueue.submit`,
  `LONG_QUEUE`) is defined in the code (a def, a class, an assignment or a field), and a bare word (`pr_follow`,
  `queued`) at least occurs there;
- every package under pipeline/ has a docstring that names each of its modules and subpackages;
- no issue number in the docs, the code's text or the benches: the history of why belongs in git, and a number
  means nothing to a reader of a fresh clone.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
LIFE = ROOT / "docs" / "life-of-a-request.md"
CODE_DIRS = ("pipeline", "views", "ui", "tests/kit")
# names of other libraries a hop calls: Streamlit's, torch's, the standard library's
FOREIGN = ("st.", "torch.", "concurrent.", "time.")
_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\(\))?")
_ISSUE = re.compile(r"\b[Ii]ssues? \d+|\bissue-\d+")  # an other project's is cited with # (vLLM issue #40696)


def python_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for folder in CODE_DIRS:
        files += [p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    return files


@functools.cache
def defined_and_used() -> tuple[set[str], set[str]]:
    """(names the code defines: functions, classes, assigned and annotated names, attributes set on self;
    every identifier and string word the code holds)."""
    defined, used = set(), set()
    for path in python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.update(re.findall(r"\w+", node.value))
            elif isinstance(node, ast.keyword) and node.arg:
                used.add(node.arg)
    return defined, used | defined


def code_spans(markdown: str) -> list[str]:
    return [t.content for block in MarkdownIt("commonmark").parse(markdown) for t in block.children or ()
            if t.type == "code_inline"]


def name_problems(spans: list[str], defined: set[str], used: set[str]) -> list[str]:
    problems = []
    for span in spans:
        if span.startswith(FOREIGN) or not _NAME.fullmatch(span) or span.endswith((".py", ".md")):
            continue
        last = span.removesuffix("()").rsplit(".", 1)[-1]
        # a call, a method or field, or a CamelCase class must be defined; a word (a key, a constant, an
        # environment variable's name) must occur
        must_define = span.endswith("()") or "." in span or (last[0].isupper() and not last.isupper())
        if must_define and last not in defined:
            problems.append(f"`{span}`: nothing in the code defines {last}")
        elif last not in used:
            problems.append(f"`{span}`: {last} occurs nowhere in the code")
    return problems


def test_the_names_life_of_a_request_gives_are_in_the_code():
    defined, used = defined_and_used()
    spans = code_spans(LIFE.read_text(encoding="utf-8"))
    assert len(spans) > 100, "the document lost its names"
    problems = name_problems(spans, defined, used)
    assert not problems, "\n".join(problems)


def test_a_renamed_function_is_caught():
    defined, used = defined_and_used()
    assert name_problems(["run_for_page()", "RunQueue.submit", "LONG_QUEUE", "pr_follow"], defined, used) == []
    assert name_problems(["run_for_the_page()", "RunQueue.submit_now", "LONGEST_QUEUE", "pr_following"],
                         defined, used) == [
        "`run_for_the_page()`: nothing in the code defines run_for_the_page",
        "`RunQueue.submit_now`: nothing in the code defines submit_now",
        "`LONGEST_QUEUE`: LONGEST_QUEUE occurs nowhere in the code",
        "`pr_following`: pr_following occurs nowhere in the code",
    ]
    assert name_problems(["RunQueues"], defined, used) == ["`RunQueues`: nothing in the code defines RunQueues"]


def package_problems(package: Path, root: Path = ROOT) -> list[str]:
    init = package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    parts = sorted(p.stem for p in package.iterdir()
                   if (p.suffix == ".py" and not p.stem.startswith("__")) or (p / "__init__.py").is_file())
    return [f"{init.relative_to(root)}: its docstring does not name {part}" for part in parts
            if not re.search(rf"\b{re.escape(part)}\b", doc)]


def test_every_package_docstring_names_its_modules():
    packages = sorted(p.parent for p in (ROOT / "pipeline").rglob("__init__.py") if "__pycache__" not in p.parts)
    assert len(packages) > 10
    problems = [problem for package in packages for problem in package_problems(package)]
    assert not problems, "\n".join(problems)


def test_a_module_left_out_of_its_package_docstring_is_caught(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Two jobs: `one.py` and sub/."""\n')
    for name in ("one.py", "two.py", "__main__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert package_problems(tmp_path, tmp_path.parent) == [
        f"{tmp_path.name}/__init__.py: its docstring does not name two"]


def issue_problems(files: list[Path]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
            for path in files for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if _ISSUE.search(line)]


def test_no_issue_numbers_in_the_docs_and_the_code():
    files = [ROOT / "README.md", ROOT / "app.py", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "bench").glob("*.py")), *sorted((ROOT / "bench").glob("*.sh")),
             ROOT / "bench" / "RESULTS.md", *sorted((ROOT / "assets").glob("*.json")),
             *python_files(), *[p for p in sorted((ROOT / "tests").rglob("test_*.py")) if p != Path(__file__)]]
    # the tests too (this file, whose examples below are issue numbers, aside)
    problems = issue_problems(files)
    assert not problems, "say what was measured and when, without the issue's number:\n" + "\n".join(problems)


def test_an_issue_number_is_caught_and_a_word_is_not():
    assert _ISSUE.search("measured in issue 40's table") and _ISSUE.search("Issue 45: bf16")
    assert _ISSUE.search("issues 12 and 13") and _ISSUE.search("issue-7")
    assert not _ISSUE.search("vLLM issue #40696")  # another project's, cited as its source
    assert not _ISSUE.search("the issue is the padding") and not _ISSUE.search("tissue 40")

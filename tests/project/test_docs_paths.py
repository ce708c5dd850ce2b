"""The documentation names only things that exist (fast tier): README.md, docs/*.md and bench/RESULTS.md.

- every relative Markdown link or image resolves to a file (and its `#anchor` to a heading of that file);
- every repository path named in backticks (`pipeline/server/room.py`, `views/`, `bench/workshop_load.py`; a partial
  path such as `stages/decode_record.py` ends some path of the repository; a bare `name.py` is some file's name);
- every `./run.sh X` is a subcommand of run.sh's case list; every `python -m pipeline SUB` (and
  `python -m ui SUB`, `tpe SUB`) a subcommand of that command line's parser;
- every page named as a URL path in backticks (`/journey`, `/presenter?follow=ROOM`) is in app.py's PAGES;
- the README stays a ten-minute read: under 250 lines.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
# made at run time or outside the repository: never a path to check
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".cache", "artifacts", ".hypothesis", ".pytest_cache", ".ruff_cache"}
RUNTIME_PREFIXES = (".cache/", ".venv/", ".hypothesis/", "__pycache__", "artifacts/", "~", "$", "/", "http:", "https:")
_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_WORD_PATH = re.compile(r"[\w.-]+(/[\w.-]*)*")
_PAGE = re.compile(r"/([a-z][a-z-]*)?(\?\S*)?")
_RUN_SH = re.compile(r"\./run\.sh[ \t]+([a-z][\w-]*)")
_MODULE_CLI = re.compile(r"python -m (pipeline|ui)[ \t]+([a-z][\w-]*)")
_TPE = re.compile(r"(?<![\w-])tpe[ \t]+([a-z][\w-]*)")  # the console script (ui/cli.py)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]


@functools.cache
def repo_paths() -> set[str]:
    """Every file and folder of the working tree, relative ('pipeline/server/room.py', 'views'), less what runs make."""
    found: set[str] = set()

    def walk(folder: Path) -> None:
        for p in folder.iterdir():
            if p.name in SKIPPED_DIRS:
                continue
            found.add(p.relative_to(ROOT).as_posix())
            if p.is_dir() and not p.is_symlink():
                walk(p)

    walk(ROOT)
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: 'Cache audit: the log (`--json`)' -> 'cache-audit-the-log---json'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    tokens = _MD.parse(markdown)
    seen: dict[str, int] = {}
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type == "heading_open":
            base = slug("".join(c.content for c in inline.children or () if c.type in ("text", "code_inline")))
            n = seen.get(base, 0)
            seen[base] = n + 1
    return {base if i == 0 else f"{base}-{i}" for base, count in seen.items() for i in range(count)}


def parts(markdown: str) -> tuple[list[str], list[str], list[str]]:
    """(link and image targets, inline code spans, fenced code blocks) of a Markdown text."""
    links, spans, blocks = [], [], []
    for block in _MD.parse(markdown):
        if block.type in ("fence", "code_block"):
            blocks.append(block.content)
        for t in block.children or ():
            if t.type == "link_open":
                links.append(t.attrs.get("href") or "")
            elif t.type == "image":
                links.append(t.attrs.get("src") or "")
            elif t.type == "code_inline":
                spans.append(t.content)
    return links, spans, blocks


def link_problems(doc: Path, links: list[str], text: str) -> list[str]:
    """`text` is the document's own Markdown: a bare `#anchor` is one of its headings."""
    problems = []
    for href in links:
        if re.match(r"[a-z][a-z+.-]*:", href):  # http:, mailto:: not a file of ours
            continue
        target, _, anchor = href.partition("#")
        if not target:
            if anchor not in anchors(text):
                problems.append(f"link to {href}: no such heading here")
            continue
        path = (doc.parent / target).resolve()
        if not path.exists():
            problems.append(f"link to {href}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
            problems.append(f"link to {href}: no heading #{anchor} in {path.relative_to(ROOT)}")
    return problems


def path_problems(spans: list[str], paths: set[str]) -> list[str]:
    top = {p for p in paths if "/" not in p}
    names = {p.rsplit("/", 1)[-1] for p in paths}
    problems = []
    for span in spans:
        for word in span.split():
            word = word.removeprefix("./").rstrip(",;:")
            if word.startswith(RUNTIME_PREFIXES) or not _WORD_PATH.fullmatch(word) or "..." in word:
                continue
            bare = word.rstrip("/")
            if "/" in bare:
                if bare.split("/", 1)[0] in top:
                    ok = bare in paths
                else:  # a partial path: the end of some path of the repository
                    ok = any(p == bare or p.endswith("/" + bare) for p in paths)
            elif bare in top or word.endswith("/"):
                ok = bare in top or any(p.endswith("/" + bare) for p in paths)
            elif bare.endswith((".py", ".sh")):
                ok = bare in names
            else:
                continue  # a word, a dotted name, a file of a model folder (config.json)
            if not ok:
                problems.append(f"`{span}`: no {word} in the repository")
    return problems


@functools.cache
def run_sh_commands() -> set[str]:
    """The subcommands of run.sh's top-level `case "${1:-app}" in` (its entries sit two spaces in)."""
    text = (ROOT / "run.sh").read_text(encoding="utf-8")
    body = text.split('case "${1:-app}" in', 1)[1]
    return set(re.findall(r"^  ([a-z][\w-]*)\)", body, flags=re.MULTILINE))


@functools.cache
def cli_commands() -> dict[str, set[str]]:
    """{'pipeline': {'trace', ...}, 'ui': {..., 'report'}, 'tpe': ...}: each command line's subcommands, from its
    own parser."""
    import argparse

    from pipeline.cli import build_parser as pipeline_parser
    from ui.__main__ import build_parser as ui_parser

    def subcommands(parser: argparse.ArgumentParser) -> set[str]:
        return {name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}

    from ui.cli import build_parser as tpe_parser

    return {"pipeline": subcommands(pipeline_parser()), "ui": subcommands(ui_parser()),
            "tpe": subcommands(tpe_parser())}


@functools.cache
def page_urls() -> set[str]:
    """The pages' URL paths ('journey', ...): views/chrome/page_list.py's PAGES."""
    from views.chrome.page_list import PAGES

    return {p.url for p in PAGES}


def command_problems(text: str, run_sh: set[str], cli: dict[str, set[str]]) -> list[str]:
    problems = [f"./run.sh {m}: not a case of run.sh ({', '.join(sorted(run_sh))})"
                for m in _RUN_SH.findall(text) if m not in run_sh]
    problems += [f"python -m {prog} {sub}: not a subcommand ({', '.join(sorted(cli[prog]))})"
                 for prog, sub in _MODULE_CLI.findall(text) if sub not in cli[prog]]
    problems += [f"tpe {sub}: not a subcommand ({', '.join(sorted(cli['tpe']))})"
                 for sub in _TPE.findall(text) if sub not in cli["tpe"]]
    return problems


def page_problems(spans: list[str], urls: set[str]) -> list[str]:
    problems = []
    for span in spans:
        m = _PAGE.fullmatch(span.strip())
        if m and m.group(1) is not None and m.group(1) not in urls:
            problems.append(f"`{span}`: no page /{m.group(1)} in app.py's PAGES")
    return problems


def problems_of(doc: Path, text: str) -> list[str]:
    links, spans, blocks = parts(text)
    return (link_problems(doc, links, text) + path_problems(spans, repo_paths())
            + command_problems("\n".join(spans + blocks), run_sh_commands(), cli_commands())
            + page_problems(spans, page_urls()))


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_everything_the_docs_name_exists(doc):
    assert doc.exists(), f"{doc.relative_to(ROOT)} is missing"
    problems = problems_of(doc, doc.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_ten_minute_read():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (under {README_MAX_LINES})"


def test_the_readme_links_every_doc():
    links, _, _ = parts((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {(ROOT / href.partition("#")[0]).resolve() for href in links}
    missing = [d.relative_to(ROOT).as_posix() for d in doc_files()[1:] if d.resolve() not in linked]
    assert missing == [], f"not in the README's docs index: {missing}"


def test_the_checks_catch_what_does_not_exist():
    """Each check finds a bogus name, and passes the real one beside it."""
    doc = ROOT / "docs" / "example.md"
    text = ("# Top\n\n[ok](../README.md) [gone](gone.md) [bad anchor](#nowhere) [good anchor](#top)\n\n"
            "`pipeline/server/room.py` `pipeline/nope.py` `views/` `nothere/` `stages/decode_record.py` "
            "`stages/nope.py` "
            "`long_job.py` `nope_module.py` `config.json` `.cache/room-store/`\n\n"
            "`/journey` `/no-such-page` `/presenter?follow=ROOM` `/_stcore/health`\n\n"
            "```bash\n./run.sh test\n./run.sh frobnicate\npython -m pipeline trace x\npython -m pipeline nope\n"
            "python -m ui report x\n.venv/bin/tpe report x\ntpe nope\n```\n")
    found = problems_of(doc, text)
    for bogus in ("gone.md", "#nowhere", "pipeline/nope.py", "nothere/", "stages/nope.py", "nope_module.py",
                  "/no-such-page", "./run.sh frobnicate", "python -m pipeline nope", "tpe nope"):
        assert any(bogus in p for p in found), f"{bogus} not reported: {found}"
    assert len(found) == 10, found

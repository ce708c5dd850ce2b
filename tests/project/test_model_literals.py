"""Page text reads the model's numbers and names from its dimensions, its tokenizer and its template, so a
second model (Gemma 3: 262,144 tokens, other turn markers) is described as itself. Fast tier: the text
written in app.py, views/ and ui/ (string constants and f-string parts, docstrings aside) must not hold
SmolLM2's numbers or markers."""
import ast
from pathlib import Path

import pytest
from kit.paths import source_tree

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "app.py", *sorted((ROOT / "views").rglob("*.py")), *sorted((ROOT / "ui").glob("*.py"))]
LITERALS = ["49,152", "49152", "49_152", "30 layers", "30 blocks", "576", "9 heads", "9 query heads", "3 KV",
            "3 key/value", "SmolLM", "135M", "<|im_start|>", "<|im_end|>", "im_start", "im_end", "<|endoftext|>"]
# (file, literal): places about SmolLM2 on purpose. Keep it short; each says why.
ALLOWED: set[tuple[str, str]] = set()


def page_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant in the file, f-string parts included, docstrings left out."""
    tree = source_tree(path)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_scan_finds_a_literal_where_one_is_written(tmp_path):
    sample = tmp_path / "page.py"
    sample.write_text('"""About SmolLM2 (a docstring: not page text)."""\n'
                      'st.caption(f"V = 49,152 tokens, {n} of them")\n# SmolLM2 in a comment\n')
    found = [(line, lit) for line, text in page_strings(sample) for lit in LITERALS if lit in text]
    assert found == [(2, "49,152")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_text_names_no_model_number_or_marker(path):
    name = str(path.relative_to(ROOT))
    found = [f"{name}:{line}: {lit!r} in {text[:80]!r}" for line, text in page_strings(path) for lit in LITERALS
             if lit in text and (name, lit) not in ALLOWED]
    assert not found, ("read it from the model (lm.config_dims, trace.dims, lm.name) or its template "
                       "(pipeline.stages.template.turn_markers):\n" + "\n".join(found))

"""The README's Python example runs as written (when the tests run from the repository)."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_example(ctx, capsys):
    if not os.path.exists(README):
        pytest.skip("README.md is not beside the tests")
    pytest.importorskip("matplotlib").use("Agg")
    text = open(README, encoding="utf-8").read()
    m = re.search(r"<!-- python-example[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, "the README's python-example block is missing"
    exec(compile(m.group(1), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "(2, 4, 100)" in printed and "clattn.Array(" in printed

"""README examples run: its ```pycon blocks as doctests, its `codegen` commands through the CLI
(so a changed table or flag cannot leave a stale example behind)."""
from __future__ import annotations

import doctest
import os
import re
import shlex

import pytest

from codegen import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    README = _f.read()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", README, flags=re.S | re.M)


def test_readme_doctests():
    blocks = _blocks("pycon")
    assert blocks, "README.md has no ```pycon block"
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for i, text in enumerate(blocks):
        test = parser.get_doctest(text, {}, f"README.md pycon block {i + 1}", "README.md", 0)
        assert test.examples, f"README.md pycon block {i + 1} has no >>> example"
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def _readme_commands() -> list[str]:
    """`codegen …` lines of the README's sh blocks (continuations joined, comments and the
    `[--flag]` notation dropped), except the one that writes generated/."""
    commands = []
    for block in _blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\[[^\]]*\]", "", line.split("#")[0]).strip()
            if line.startswith("codegen ") and line != "codegen regenerate":
                commands.append(line)
    return commands


def test_readme_lists_codegen_commands():
    assert len(_readme_commands()) >= 4


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_codegen_command_runs(command, capsys):
    assert cli.main(shlex.split(command)[1:]) == 0, capsys.readouterr().err

"""The README is one page a newcomer reads (issue 32): short, its test command the one CI runs, and every link in
it and in docs/ leading to a file and heading that exist (the reference material lives in docs/reference.md)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT_BYTES = 15_000

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_is_one_page():
    size = len(README.read_bytes())
    assert size < README_LIMIT_BYTES, f"README.md is {size} bytes: move reference material to docs/reference.md"


def test_readme_gives_the_test_command_ci_runs():
    """`.ci/run` ends with the README's install-and-test command; a newcomer running the README's runs CI's."""
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1].strip()
    assert ci_command in README.read_text()


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # a '#' line in a code block is no heading
    return {github_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.name}: {broken}"

"""The docs hold together: every relative link in README.md and docs/ resolves (file and heading), docs
pages link only inside docs/ (what mkdocs can build), and every page is in mkdocs.yml's nav. These run
without mkdocs; with it installed (the `docs` extra) `mkdocs build --strict` runs too."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))

FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1", flags=re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", flags=re.M)


def prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading; GitHub agrees for plain words."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such heading")
        elif path.parent == DOCS and not dest.is_relative_to(DOCS):
            broken.append(f"{target}: outside docs/, which mkdocs cannot link")
    return broken


def nav_pages() -> list[str]:
    """The .md files mkdocs.yml's nav names (read as text: no YAML parser needed)."""
    text = (REPO / "mkdocs.yml").read_text()
    nav = text.split("\nnav:", 1)[1]
    return re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?(\S+\.md)\s*$", nav, flags=re.M)


@pytest.mark.parametrize("path", [REPO / "README.md", *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_every_docs_page_is_in_the_nav_and_the_nav_names_only_pages():
    named = nav_pages()
    assert sorted(named) == sorted(p.name for p in PAGES)
    assert len(named) == len(set(named)), "a page is in the nav twice"


def test_the_readme_links_every_docs_page():
    linked = {Path(t.partition("#")[0]).name for t in relative_links(REPO / "README.md")}
    assert {p.name for p in PAGES if p.name != "index.md"} <= linked


def test_broken_links_are_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Real heading\n")
    page.write_text("[a](other.md#real-heading) `[b](gone.md)`\n[c](gone.md) [d](other.md#nope) [e](https://x.y/z)\n")
    assert broken_links(page) == ["gone.md: no such file", "other.md#nope: no such heading"]


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs comes with the `docs` extra")
    pytest.importorskip("material", reason="mkdocs-material comes with the `docs` extra")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                            capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # quiet Material's banner
    assert result.returncode == 0, result.stderr

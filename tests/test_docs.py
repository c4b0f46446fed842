"""The reference in README.md and docs/: every relative link lands on a file of the repository
(and a heading of it, where it names one), README leads nowhere outside the repository, and the
pages name every test of the catalog and every option of the command line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from peakbench import cli
from peakbench.catalog import default_catalog

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """Markdown without its fenced code blocks and code spans, where brackets are not links."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text()))


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", page.read_text(), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.replace("`", "").lower()).replace(" ", "-") for h in HEADING.findall(text)}


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("#")


def test_the_pages_exist():
    for name in ("README.md", "cli.md", "tests.md", "result-format.md", "result.schema.json", "spec-format.md",
                 "changelog.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"


def test_link_finder_sees_links_and_skips_code():
    text = "[a](docs/cli.md) `[b](nowhere.md)`\n```\n[c](gone.md)\n```\n[d](https://example.org) [e](#x)"
    found = LINK.findall(prose(text))
    assert found == ["docs/cli.md", "https://example.org", "#x"]
    assert [t for t in found if relative(t)] == ["docs/cli.md"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves_inside_the_repository(page):
    problems = []
    for target in filter(relative, links(page)):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve()
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: leaves the repository")
        elif not dest.exists():
            problems.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_same_page_anchors_resolve(page):
    missing = [t for t in links(page) if t.startswith("#") and t[1:] not in anchors(page)]
    assert not missing, f"{page.relative_to(ROOT)}: no heading for {missing}"


def test_readme_names_no_path_outside_the_repository():
    text = README.read_text()
    assert "../" not in text
    assert "shared/DESIGN.md" not in text
    assert not [t for t in links(README) if relative(t) and t.startswith("/")]


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text()
    assert "scripts/setup.sh && .venv/bin/peakbench --backend vulkan" in text
    assert "scripts/setup.sh --test && .venv/bin/python -m pytest -q" in text


def test_readme_links_the_reference():
    targets = set(links(README))
    for target in ("docs/cli.md", "docs/tests.md", "docs/result-format.md", "docs/result.schema.json",
                   "docs/spec-format.md", "PERFORMANCE_ANALYSIS.md", "LICENSE"):
        assert target in targets, f"README.md does not link {target}"


def test_the_docs_index_links_every_page():
    targets = {t.partition("#")[0] for t in links(DOCS / "README.md")}
    pages = {p.name for p in DOCS.iterdir() if p.is_file() and p.name != "README.md"}
    assert pages <= targets, f"docs/README.md does not link {sorted(pages - targets)}"


@pytest.mark.parametrize("name", default_catalog().names())
def test_every_catalog_test_is_in_the_test_reference(name):
    assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", (DOCS / "tests.md").read_text()), \
        f"docs/tests.md does not mention {name}"


def test_every_command_line_option_is_in_the_cli_reference():
    text = (DOCS / "cli.md").read_text()
    options = [o for action in cli.build_parser()._actions for o in action.option_strings if o.startswith("--")]
    assert "--json" in options
    missing = [o for o in options if not re.search(rf"`{re.escape(o)}\b", text)]
    assert not missing, f"docs/cli.md does not document {missing}"


def test_every_module_has_a_test_file_or_a_named_home():
    """tests/README.md: a module's tests are in test_<package>_<module>.py, or its row of the
    table names the files that hold them."""
    readme = (ROOT / "tests" / "README.md").read_text()
    rows = {m: re.findall(r"`(test_\w+\.py)`", files)
            for cells, files in re.findall(r"^\| ((?:`[^`]+`(?:, )?)+) \| (.+) \|$", readme, re.M)
            for m in re.findall(r"`([\w/]+\.py)`", cells)}
    homeless, named_missing = [], []
    for path in sorted((ROOT / "peakbench").rglob("*.py")):
        module = path.relative_to(ROOT / "peakbench").as_posix()
        parts = module[:-3].split("/")
        if parts[-1] == "__init__":
            if not re.search(r"^(def|class) ", path.read_text(), re.M):
                continue                                    # a package marker, no code of its own
            parts = parts[:-1]
        if (ROOT / "tests" / f"test_{'_'.join(parts)}.py").exists():
            continue
        if module not in rows:
            homeless.append(module)
        named_missing += [f for f in rows.get(module, []) if not (ROOT / "tests" / f).exists()]
    assert not homeless, f"modules with no test file of their name and no row in tests/README.md: {homeless}"
    assert not named_missing, f"tests/README.md names test files that do not exist: {named_missing}"

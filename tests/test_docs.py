"""The reader-facing documents: the decisions documents (``docs/decisions/``) have a contents
list and a unique, explicit anchor per section; every link into them (the README, the
results' README, the evidence scripts' index, the gaps file, docstrings and notebooks) names a
file and an anchor that exist; and no reader-facing text names the team's issue numbers or
work periods ("issue 19", "the fifth session"), which a reader outside the team cannot follow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ofl_core.batch.gaps import DECISIONS_DIR, doc_sections, load_gaps

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = re.compile(r'^<a id="([^"]+)"></a>[ \t]*$', re.MULTILINE)
HEADING_AFTER_ANCHOR = re.compile(r'^<a id="([^"]+)"></a>[ \t]*\n\n(#{2,3}) (.+)$', re.MULTILINE)
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
DOC_REF = re.compile(r"docs/decisions/([\w.-]+\.md)(?:#([\w-]+))?")

#: reader-facing files: docs, READMEs, the gaps file, notebooks (both forms), the report's
#: templates, and the sources whose docstrings readers see
READER_GLOBS = ("README.md", "docs/decisions/*.md", "results/README.md", "results/gaps.yaml",
                "results/grids/*.yaml", "results/measurements/*.txt", "notebooks/*.py",
                "notebooks/*.ipynb", "notebooks/grids/**/*.yaml", "ofl_core/**/*.py",
                "ofl_core/batch/templates/*", "scripts/**/*.py", "scripts/**/*.md",
                "benchmarks/*.py", "tests/*.py", "run_all.py")
#: "issue 19", "issue #6", "Issue 20's", "issues 18"
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
_ORD = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
        r"\d+(?:st|nd|rd|th)")
#: a work period by its ordinal or relative name: "the fifth session", "an earlier session"
SESSION = re.compile(rf"\b(?:{_ORD}|earlier|previous|later|next) (?:work )?sessions?\b",
                     re.IGNORECASE)
#: in prose documents also "this session", "sessions it spanned", "(issue 22, second part)"
SESSION_PROSE = re.compile(r"\b(?:this|that|same) session\b|\bsessions? (?:it|they) spanned\b"
                           r"|\b(?:first|second|third) part\b", re.IGNORECASE)
PROSE_SUFFIXES = {".md", ".yaml", ".ipynb", ".j2"}


def _reader_files() -> list[Path]:
    files = {p for g in READER_GLOBS for p in ROOT.glob(g) if p.is_file()}
    return sorted(p for p in files if p.name != Path(__file__).name)


def _sections() -> dict[str, list[tuple[str, str, str]]]:
    """Per decisions file: its (anchor, heading level, title) in order."""
    return {p.name: HEADING_AFTER_ANCHOR.findall(p.read_text())
            for p in sorted(DECISIONS_DIR.glob("*.md"))}


def test_every_decisions_section_has_a_unique_explicit_anchor():
    seen: dict[str, str] = {}
    for p in sorted(DECISIONS_DIR.glob("*.md")):
        text = p.read_text()
        if p.name == "README.md":  # the index: its one heading is the contents list
            assert not ANCHOR.findall(text)
            continue
        headings = re.findall(r"^#{2,3} .+$", text, re.MULTILINE)
        anchored = HEADING_AFTER_ANCHOR.findall(text)
        assert len(anchored) == len(headings), (
            f"{p.name}: every ## / ### heading needs an <a id> line and a blank line before it")
        for anchor in ANCHOR.findall(text):
            assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", anchor), (p.name, anchor)
            assert anchor not in seen, f"anchor {anchor!r} in {p.name} and {seen[anchor]}"
            seen[anchor] = p.name
    assert len(seen) > 50


def test_each_decisions_file_and_the_index_list_every_section():
    sections = _sections()
    index = (DECISIONS_DIR / "README.md").read_text()
    for name, secs in sections.items():
        if name == "README.md":
            continue
        text = (DECISIONS_DIR / name).read_text()
        contents = text.split("Contents:", 1)[1].split("<a id=", 1)[0]
        assert [a for a, _, _ in secs] == re.findall(r"\]\(#([\w-]+)\)", contents), name
        assert f"]({name})" in index, f"the index does not list {name}"
        for anchor, _, title in secs:
            assert f"[{title}]({name}#{anchor})" in index, f"index lacks {name}#{anchor}"


def _check_target(source: Path, target: str) -> str | None:
    """Why ``target`` (a link written in ``source``) is broken, or None."""
    if re.match(r"[a-z]+:", target) or target.startswith("mailto"):
        return None  # an external URL
    path, _, anchor = target.partition("#")
    dest = (source.parent / path).resolve() if path else source
    if not dest.exists():
        return f"{target}: no such file {dest}"
    if anchor and dest.suffix == ".md":
        ids = set(ANCHOR.findall(dest.read_text()))
        if anchor not in ids:
            return f"{target}: {dest.name} has no anchor {anchor!r}"
    return None


def test_every_markdown_link_of_the_docs_resolves_to_a_file_and_anchor():
    docs = [ROOT / "README.md", ROOT / "results" / "README.md",
            ROOT / "scripts" / "evidence" / "README.md", *sorted(DECISIONS_DIR.glob("*.md"))]
    broken = [f"{p.relative_to(ROOT)}: {why}" for p in docs
              for target in MD_LINK.findall(p.read_text())
              if (why := _check_target(p, target))]
    assert not broken, "\n".join(broken)


def test_every_reference_to_a_decisions_section_exists():
    """Plain-text references (docstrings, notebooks, YAML comments, scripts) name a file of
    docs/decisions/ and, where they give one, an anchor of that file; the report's links come
    from results/gaps.yaml, whose anchors the loader checks."""
    sections = doc_sections(DECISIONS_DIR)
    files = {p.name for p in DECISIONS_DIR.glob("*.md")}
    broken = []
    for p in _reader_files():
        for name, anchor in DOC_REF.findall(p.read_text(errors="replace")):
            if name not in files:
                broken.append(f"{p.relative_to(ROOT)}: docs/decisions/{name} does not exist")
            elif anchor and f"{name}#{anchor}" not in sections:
                broken.append(f"{p.relative_to(ROOT)}: no anchor {name}#{anchor}")
    assert not broken, "\n".join(broken)
    gaps = load_gaps(ROOT / "results" / "gaps.yaml")
    assert {ref for g in gaps for ref in g.see} <= set(sections)


def test_no_reference_to_the_old_single_decisions_file():
    stale = [str(p.relative_to(ROOT)) for p in _reader_files()
             if "docs/decisions.md" in p.read_text(errors="replace")]
    assert not stale, stale


@pytest.mark.parametrize("pattern", [ISSUE, SESSION], ids=["issue N", "N-th session"])
def test_reader_facing_text_names_no_issue_numbers_or_work_sessions(pattern):
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in _reader_files()
            for m in pattern.finditer(p.read_text(errors="replace"))]
    assert not hits, "\n".join(hits)


def test_prose_documents_name_no_work_periods():
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in _reader_files()
            if p.suffix in PROSE_SUFFIXES
            for m in SESSION_PROSE.finditer(p.read_text(errors="replace"))]
    assert not hits, "\n".join(hits)


def test_the_patterns_catch_what_they_are_for():
    assert ISSUE.search("measured in issue 20 (docs)") and ISSUE.search("(issue #6)")
    assert ISSUE.search("Issue 20's readings") and not ISSUE.search("an open issue with")
    assert SESSION.search("finished in the fifth session") and SESSION.search("7th session")
    assert SESSION.search("an earlier session") and not SESSION.search('scope="session"')
    assert SESSION_PROSE.search("(issue 22, second part)") and SESSION_PROSE.search("this session")

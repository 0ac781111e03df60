"""The guide's links hold: every relative link in README.md and docs/*.md names a file of the
repository and, with a `#fragment`, a heading of that page (GitHub's anchors); README.md's
index links every page of docs/."""
import importlib.util
import re
from pathlib import Path

_spec = importlib.util.spec_from_file_location("docs_docsrun_links", Path(__file__).with_name("docsrun.py"))
docsrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docsrun)

ROOT = docsrun.ROOT
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out, fenced = set(), False
    for line in page.read_text().splitlines():
        if docsrun.FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_relative_links_and_anchors_exist():
    bad = []
    for page in docsrun.guide_pages():
        fenced = False
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if docsrun.FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, fragment = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{n}"
                if not dest.exists():
                    bad.append(f"{where}: {target}: no such file")
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                    bad.append(f"{where}: {target}: no heading with that anchor in {dest.name}")
    assert not bad, "\n".join(bad)


def test_readme_indexes_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(readme)}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"docs pages README.md does not link: {missing}"


def test_repository_paths_in_inline_code_exist():
    """A file or folder of the repository named in inline code (`Tests/Server/h2attack.py`) exists,
    so a rename cannot leave the guide pointing nowhere. Placeholders (<name>, {a,b}, *) are
    skipped, and so are the generated tables (layers.md, ops.md: paths under Tests/)."""
    top = {p.name for p in ROOT.iterdir()} - {".build", ".venv"}
    bad = []
    for page in docsrun.guide_pages():
        if page.name in ("layers.md", "ops.md"):
            continue
        for n, span in docsrun.inline_code(page):
            for w in re.split(r"[\s,()]+", span):
                w = w.strip("`.:;")
                if any(c in w for c in "<>{}*$"):
                    continue
                if re.match(r"^[\w.-]+(/[\w.-]+)+/?$", w) and w.split("/")[0] in top and not (ROOT / w).exists():
                    bad.append(f"{page.relative_to(ROOT)}:{n}: {w}: no such file or folder")
    assert not bad, "\n".join(bad)

"""The README and the docs pages hold together: the README stays a front door, every link and
anchor resolves, every API page names a module that exists, user pages speak only of what users
have, and the API example runs. `make docs` builds the site itself (strict); these checks need
no MkDocs and run in a second."""
import glob
import importlib.util
import os
import re
import subprocess
import sys
import unicodedata

import pytest

from tests.conftest import kill_tree, mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
#: pages a user reads: the README, the docs site, the changelog, the jobs' notes
USER_PAGES = sorted([README, os.path.join(ROOT, "CHANGELOG.md"), os.path.join(ROOT, "jobs", "README.md"),
                     os.path.join(ROOT, "data", "README.md"),
                     *glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)])
MAX_README_LINES = 300

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
EXPLICIT_ID = re.compile(r"\{\s*#([\w-]+)\s*\}\s*$")


def prose_lines(path):
    """The lines of a Markdown file outside fenced code blocks."""
    inside = False
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield line.rstrip("\n")


def slug(text):
    """A heading's anchor as MkDocs' toc extension makes it (GitHub's agrees on plain headings)."""
    text = re.sub(r"[`*]", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path):
    found = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if match:
            title = match.group(2)
            explicit = EXPLICIT_ID.search(title)
            found.add(explicit.group(1) if explicit else slug(title))
    return found


def links(path):
    for number, line in enumerate(prose_lines(path), 1):
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            yield number, match.group(1) or match.group(2)


def test_readme_is_a_front_door():
    with open(README, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    text = "\n".join(lines)
    for needed in ("make demo", "make test", "source .venv/bin/activate", "mpirun", "sbatch jobs/train.sbatch"):
        assert needed in text, f"README.md does not say '{needed}'"


def test_every_headline_figure_links_to_its_page():
    """Each row of the README's results table links to the docs page that holds its measurement."""
    lines = list(prose_lines(README))
    assert "## Results" in lines, "the README has no Results section"
    section = lines[lines.index("## Results") + 1:]
    section = section[:next((i for i, line in enumerate(section) if line.startswith("## ")), len(section))]
    rows = [line for line in section if line.startswith("|") and not re.match(r"^\|[-| :]+\|$", line)]
    assert len(rows) >= 3, "the README's Results section has no table"
    for row in rows[1:]:  # the first row is the header
        assert re.search(r"\]\(docs/[^)]+\.md(#[\w-]+)?\)", row), f"README row without a docs link: {row}"


@pytest.mark.parametrize("path", USER_PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_link_resolves(path):
    broken = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(resolved):
            broken.append(f"line {number}: {target} (no such file)")
        elif path.startswith(DOCS + os.sep) and not resolved.startswith(DOCS + os.sep):
            broken.append(f"line {number}: {target} (outside docs/: the site cannot link to it)")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            broken.append(f"line {number}: {target} (no heading with anchor '{anchor}')")
    assert not broken, f"{os.path.relpath(path, ROOT)}: " + "; ".join(broken)


FORBIDDEN = [r"\.\./shared", r"\bshared/(data|tools)", r"seed 00\d", r"\bthe issue\b", r"\bthe anchor('s)?\b",
             r"\b(this|each|another|earlier|previous) sessions?\b", r"(?<![\w.])/work/", r"/home/\w+/"]


@pytest.mark.parametrize("path", USER_PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_user_pages_speak_only_of_what_users_have(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    found = [m.group(0) for pattern in FORBIDDEN for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert not found, f"{os.path.relpath(path, ROOT)} mentions {found}"


def test_api_pages_name_modules_that_exist():
    names = []
    for path in glob.glob(os.path.join(DOCS, "reference", "**", "*.md"), recursive=True):
        names += [m.group(1) for m in re.finditer(r"^::: ([\w.]+)", open(path, encoding="utf-8").read(), re.M)]
    assert names, "no API page renders a module"
    missing = [name for name in names if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None
               or (importlib.util.find_spec(name) is None and not _has_attribute(name))]
    assert not missing, f"API pages name what does not exist: {missing}"


def _has_attribute(dotted):
    module, _, attribute = dotted.rpartition(".")
    return hasattr(importlib.import_module(module), attribute)


def code_imports(path):
    """``from hpcgnn... import a, b`` statements in a page's Python code blocks: (module, [names])."""
    text = open(path, encoding="utf-8").read()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        statements = re.findall(r"^from (hpcgnn[\w.]*) import \(([^)]*)\)", block, re.M)
        statements += re.findall(r"^from (hpcgnn[\w.]*) import (\w[\w ,]*)", block, re.M)
        for module, names in statements:
            yield module, [n.split("#")[0].strip() for n in names.split(",") if n.split("#")[0].strip()]


def test_code_in_the_docs_imports_what_exists():
    """The pages' Python examples import names the package has (they move when the layout does)."""
    missing = []
    for path in USER_PAGES:
        for module, names in code_imports(path):
            imported = importlib.import_module(module)
            missing += [f"{os.path.relpath(path, ROOT)}: {module}.{n}" for n in names if not hasattr(imported, n)]
    assert not missing, missing


def test_the_layer_table_lists_every_module():
    """design.md's table of layers names each sub-package's modules, no more and no fewer."""
    rows = [line.split("|") for line in prose_lines(os.path.join(DOCS, "design.md"))
            if re.match(r"^\| `[\w/]+/` \|", line)]
    assert len(rows) >= 10, "design.md has no layer table"
    wrong = []
    for cells in rows:
        layer = cells[1].strip().strip("`").rstrip("/")
        listed = set(re.findall(r"`([\w/]+)`", cells[2]))
        folder = os.path.join(ROOT, "hpcgnn", layer)
        present = {name[:-3] for name in os.listdir(folder) if name.endswith(".py") and not name.startswith("__")}
        present |= {name + "/" for name in os.listdir(folder)
                    if os.path.isfile(os.path.join(folder, name, "__init__.py"))}
        if listed != present:
            wrong.append(f"{layer}/: missing {sorted(present - listed)}, gone {sorted(listed - present)}")
    assert not wrong, "docs/design.md's layer table: " + "; ".join(wrong)


def test_cli_pages_name_real_subcommands():
    from hpcgnn.cli import SUBCOMMANDS

    text = open(os.path.join(DOCS, "guide", "cli.md"), encoding="utf-8").read()
    shown = set(re.findall(r"^<!-- cli-help: ([a-z]+)", text, re.M))
    assert shown == set(SUBCOMMANDS), f"cli.md shows {sorted(shown)}, the command has {sorted(SUBCOMMANDS)}"


def test_api_example_trains_on_two_ranks(tmp_path):
    cmd = [mpiexec_path(), "-n", "2", sys.executable, os.path.join(ROOT, "docs", "api_example.py"), str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError("the API example did not finish within 180 s") from None
    assert proc.returncode == 0, err[-2000:]
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", out).group(1))
    assert accuracy > 0.4, out  # 4 planted classes: chance is 0.25

"""Write the performance page (docs/performance.md) from the benchmarks' records.

Every benchmark appends a record of each run to ``bench/results/<script>.json``
(``bench/common.py``'s ``record``). The page has a section per benchmark, and in it, for each
command (and each table of a command that prints several), the table of that command's latest
record, with its commit, date and machine; earlier records of the same command get one line
each, their figures staying in the JSON. The output depends on the records alone (no clock, no
machine facts), so rendering twice gives the same bytes.

    python bench/render.py                      # writes docs/performance.md
    python bench/render.py --check              # exit 1 if docs/performance.md is not up to date
"""
from __future__ import annotations

import argparse
import ast
import glob
import hashlib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
OUTPUT = os.path.join(ROOT, "docs", "performance.md")

#: the page's order of benchmarks and their headings; a results file not named here follows them
SECTIONS = {
    "partition": "Partitioning",
    "balance": "Balance constraints",
    "prep_memory": "Memory of distributed partitioning",
    "scale": "A 5M-node graph end to end",
    "costmodel": "A cost model for ogbn-papers100M",
    "checksum": "Part-file checksums",
    "gather": "Feature gathers",
    "memory": "Memory of a loaded partition",
    "sample": "Sampling",
    "train": "Training",
    "gemm": "Where a step's time goes",
    "attention": "GAT attention",
    "grad_bf16": "bfloat16 gradient reduction",
    "network": "Across machines",
    "remote_read": "Remote reads",
    "accuracy": "Accuracy on real datasets",
    "link": "Link prediction",
    "samplers": "Samplers",
    "layer_sampling": "LADIES sampling cost",
    "sampler_defaults": "Sampler defaults on generated graphs",
    "hetero_speed": "Typed graphs beside DGL",
    "relational_sampling": "Per-relation sampling",
    "relational_layers": "R-GCN and R-GAT layers",
    "hetero_generate": "A typed graph of IGBH's schema",
    "gpu": "Training on a GPU",
    "gpu_profile": "One rank's GPU steps, profiled",
    "torch_kernels": "Torch kernels beside the compiled ones",
    "straggler": "Stragglers",
    "elastic": "Elastic rank counts",
}
#: the fields every record must have
REQUIRED = ("command", "commit", "date", "machine")


def load(results_dir: str) -> dict[str, list[dict]]:
    """Local. Every results file of ``results_dir``: {benchmark name: records, oldest first}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path) as fh:
            records = json.load(fh)
        if not isinstance(records, list) or not records:
            raise ValueError(f"{path}: not a non-empty list of records")
        for i, rec in enumerate(records):
            missing = [key for key in REQUIRED if key not in rec]
            if missing or ("rows" not in rec and "figures" not in rec):
                raise ValueError(f"{path}: record {i} lacks {', '.join(missing) or 'rows or figures'}")
        out[os.path.splitext(os.path.basename(path))[0]] = records
    return out


def slug(text: str) -> str:
    """Local. ``text`` as an HTML id: lower case, runs of other characters as one dash; long
    ones cut and told apart by a hash of the whole."""
    plain = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(plain) > 60:
        plain = plain[:50].rstrip("-") + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return plain


def anchor(name: str, command: str, table: str | None) -> str:
    """Local. The stable id of a command's table in benchmark ``name``'s section: the command's
    arguments after the script (the launcher and interpreter dropped), then the table's name."""
    args = re.sub(r"^(mpiexec -n \d+ )?python bench/" + re.escape(name) + r"\.py\s*", "", command)
    parts = [slug(name), slug(args) if args else "defaults"]
    if table:
        parts.append(slug(table))
    return "-".join(part for part in parts if part)


def groups(records: list[dict]) -> list[tuple[str, list[tuple[int, dict]]]]:
    """Local. The records by (command, table), in the order each first appears: [(key, [(index,
    record), ...])], each list oldest first by date (file order among equal dates)."""
    by_key: dict = {}
    for i, rec in enumerate(records):
        by_key.setdefault((rec["command"], rec.get("table") or ""), []).append((i, rec))
    return [(key, sorted(members, key=lambda m: (m[1]["date"], m[0]))) for key, members in by_key.items()]


def latest(records: list[dict], command: str, table: str | None = None) -> dict:
    """Local. The record the page shows for ``command`` (and ``table``): the latest by date, the
    last appended among equal dates."""
    for (cmd, tab), members in groups(records):
        if cmd == command and tab == (table or ""):
            return members[-1][1]
    raise KeyError(command)


def fmt(value) -> str:
    """Local. One table cell: text as it is, numbers rounded for reading, lists joined by ' / '."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return " / ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items())
    return str(value).replace("\n", " ")


def _cell(value) -> str:
    return fmt(value).replace("|", "\\|")


def table(rec: dict) -> list[str]:
    """Local. The record's rows (or figures) as a Markdown table."""
    if "rows" in rec:
        columns = rec.get("columns") or list(dict.fromkeys(key for row in rec["rows"] for key in row))
        lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rec["rows"]]
    else:
        lines = []
    if "figures" in rec:
        if lines:
            lines.append("")
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in rec["figures"].items()]
    return lines


def machine_line(machine: dict) -> str:
    """Local. A machine in one line: its name where the record gives one, else its facts."""
    if "name" in machine:
        return machine["name"]
    facts = [machine.get("cpu", "unknown CPU")]
    if machine.get("matrix_units"):
        facts.append(f"matrix units {machine['matrix_units']}")
    if machine.get("cores"):
        facts.append(f"{machine['cores']} cores")
    if machine.get("mem_GiB"):
        facts.append(f"{machine['mem_GiB']} GiB")
    for lib in ("torch", "numpy"):
        if machine.get(lib):
            facts.append(f"{lib} {machine[lib]}")
    if machine.get("omp_threads") not in (None, "unset"):
        facts.append(f"OMP_NUM_THREADS={machine['omp_threads']}")
    return ", ".join(facts)


def provenance(rec: dict) -> str:
    """Local. Commit, date and machine of a record, in one line."""
    commit = f"`{rec['commit']}`" + (" with uncommitted changes" if rec.get("dirty") else "")
    text = f"commit {commit}, {rec['date'][:10]}, {machine_line(rec['machine'])}"
    if rec.get("migrated"):
        text += f"; transcribed from the {rec['migrated']}, not re-run"
    return text


def purpose(name: str) -> str:
    """Local. What benchmark ``name`` measures: the first paragraph of its script's docstring."""
    path = os.path.join(ROOT, "bench", name + ".py")
    if not os.path.exists(path):
        return ""
    with open(path) as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or ""
    first = doc.split("\n\n")[0]
    return " ".join(first.replace("``", "`").split())


def section(name: str, records: list[dict]) -> list[str]:
    """Local. One benchmark's section of the page."""
    title = SECTIONS.get(name, name)
    lines = [f"## {title} (`bench/{name}.py`) {{ #{slug(name)} }}", ""]
    about = purpose(name)
    if about:
        lines += [about, ""]
    for (command, tab), members in groups(records):
        index, rec = members[-1]
        heading = rec.get("title") or tab or command
        lines += [f"### {heading} {{ #{anchor(name, command, tab)} }}", "", "```bash", command, "```", "",
                  provenance(rec) + f" (`bench/results/{name}.json`, record {index}).", ""]
        if rec.get("note"):
            lines += [" ".join(rec["note"].split()), ""]
        lines += table(rec) + [""]
        if len(members) > 1:
            lines += ["Earlier records of this command:", ""]
            lines += [f"- record {i}: {provenance(r)}" for i, r in reversed(members[:-1])]
            lines.append("")
    return lines


def render(results: dict[str, list[dict]]) -> str:
    """Local. The whole page from {benchmark name: records}."""
    names = [n for n in SECTIONS if n in results] + sorted(n for n in results if n not in SECTIONS)
    lines = ["# Performance", "",
             "<!-- Written by bench/render.py from bench/results/*.json: edit those, not this page. -->", "",
             "Every table below is the latest record of its command: each benchmark appends a JSON "
             "record of every run (command, commit, date, machine, figures) to "
             "`bench/results/<script>.json`, and `python bench/render.py` writes this page from "
             "those files. Earlier records of a command are listed under its table, their figures in "
             "the JSON. Records marked \"transcribed from the README\" hold tables measured before "
             "the records existed, copied from the README that cited them, with the commit, machine "
             "and command it named; a new run of the same command replaces them here.", "",
             "Runs on these shared 2-core machines vary by 10-15%: compare figures within one table "
             "(one run), not across tables.", ""]
    for name in names:
        lines += section(name, results[name])
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=RESULTS, help="directory of the records (default bench/results)")
    parser.add_argument("--out", default=OUTPUT, help="the page to write (default docs/performance.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    page = render(load(args.results))
    if args.check:
        current = open(args.out).read() if os.path.exists(args.out) else None
        if current != page:
            print(f"{os.path.relpath(args.out)} is out of date: run python bench/render.py", file=sys.stderr)
            return 1
        return 0
    from hpcgnn.runtime.files import atomic_path

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with atomic_path(args.out) as tmp, open(tmp, "w") as fh:
        fh.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())

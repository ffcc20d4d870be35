"""The benchmarks' records (bench/results/*.json) and the performance page written from them."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import common  # noqa: E402
import render  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results")


def _record(date, epoch_s, commit="aaaaaaa"):
    return {"command": "python bench/train.py --graphs small", "commit": commit, "dirty": False, "date": date,
            "machine": {"cpu": "Test CPU", "cores": 2, "mem_GiB": 4.0},
            "rows": [{"graph": "small", "ranks": 2, "median epoch s": epoch_s}]}


def test_page_shows_the_latest_record_of_a_command(tmp_path):
    # the newer record written first: the page follows the dates, not the file order
    (tmp_path / "train.json").write_text(json.dumps([_record("2026-02-01T00:00:00+00:00", 1.25, "bbbbbbb"),
                                                    _record("2026-01-01T00:00:00+00:00", 9.75)]))
    page = render.render(render.load(str(tmp_path)))
    assert "| small | 2 | 1.25 |" in page
    assert "9.75" not in page                      # the older figures stay in the JSON
    assert "- record 1: commit `aaaaaaa`, 2026-01-01, Test CPU" in page   # listed in one line
    assert page.count("{ #train-graphs-small }") == 1
    assert render.render(render.load(str(tmp_path))) == page   # deterministic


def test_records_written_by_the_benchmarks_helper_render(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, "bench", "sample.py"), "--graphs", "small"])
    path = str(tmp_path / "sample.json")
    first = common.record([{"what": "sampling only", "seeds/s": 1000.0}], path=path)
    second = common.record([{"what": "sampling only", "seeds/s": 2000.0}], path=path, title="rates")
    records = json.loads(open(path).read())
    assert [r["rows"][0]["seeds/s"] for r in records] == [1000.0, 2000.0]
    assert first["command"] == second["command"] == "python bench/sample.py --graphs small"
    assert {"command", "commit", "dirty", "date", "machine"} <= set(second)
    assert "cpu" in second["machine"] and "torch" in second["machine"]
    page = render.render(render.load(str(tmp_path)))
    assert "| sampling only | 2,000 |" in page and "| sampling only | 1,000 |" not in page


def test_record_without_figures_is_refused(tmp_path):
    with pytest.raises(ValueError):
        common.record(path=str(tmp_path / "x.json"))
    assert not os.path.exists(tmp_path / "x.json")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(RESULTS) if f.endswith(".json")))
def test_every_results_file_holds_records(name):
    with open(os.path.join(RESULTS, name)) as fh:
        records = json.load(fh)
    assert isinstance(records, list) and records
    for rec in records:
        assert rec["command"] and rec["commit"] and isinstance(rec["machine"], dict) and rec["machine"]
        assert "rows" in rec or "figures" in rec


def test_performance_page_is_rendered_from_the_records():
    assert render.main(["--check"]) == 0, "docs/performance.md is out of date: run python bench/render.py"

"""Every numeric flag of every command has a domain, and a value outside it is one line, exit 2.

The flags are found by walking each command's parser, so a numeric flag added without a
:class:`~hpcgnn.runtime.flags.Domain` fails :func:`test_every_numeric_flag_declares_a_domain`,
and every domain is tried with values outside it, in-process.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from hpcgnn.cli import convert, generate
from hpcgnn.cli import inspect as inspect_command
from hpcgnn.cli import partition as partition_command
from hpcgnn.prep import partition as partition_module
from hpcgnn.prep.edge_split import parse_edge_split, parse_negatives_kind
from hpcgnn.prep.partition import parse_balance, parse_node_split
from hpcgnn.prep.read import _delimiter_argument
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import Domain
from hpcgnn.sampling.layer import parse_sizes
from hpcgnn.sampling.neighbor import parse_fanouts
from hpcgnn.sampling.relational import check_relation_fanouts
from hpcgnn.training import config

#: flags whose type parses structured text (no number to bound, or a list of them): each checks
#: its own syntax in one line
STRUCTURED = {parse_node_split, parse_edge_split, parse_negatives_kind, parse_balance, _delimiter_argument,
              parse_fanouts, parse_sizes, check_relation_fanouts}


def commands(tmp):
    """``(name, parser, main, argv that the parser accepts)`` of every command (a command with
    subcommands once per subcommand)."""
    out = str(tmp / "out")
    rmat = ["rmat", "--nodes", "10", "--edges", "5", "--out", out + ".npz"]
    sbm = ["sbm", "--nodes", "10", "--avg-degree", "2", "--out", out + ".npz"]
    return [("train", config.build_parser(), _train_main, ["--data", str(tmp)]),
            ("evaluate", config.build_evaluate_parser(), _evaluate_main,
             ["--data", str(tmp), "--checkpoint", str(tmp / "c.pt")]),
            ("partition", partition_module.build_parser(), partition_command.main,
             ["g.npz", "--parts", "2", "--out", out]),
            ("generate rmat", generate._build_parser(), generate.main, rmat),
            ("generate sbm", generate._build_parser(), generate.main, sbm),
            ("generate hetero", generate._build_parser(), generate.main,
             ["hetero", "--nodes", "100", "--edges", "50", "--out", out + ".npz"]),
            ("convert", convert._build_parser(), convert.main, ["g.npz", out + ".h5"]),
            ("inspect", inspect_command.build_parser(), inspect_command.main, [str(tmp)])]


def _train_main(argv):
    from hpcgnn.train import main

    return main(argv)


def _evaluate_main(argv):
    from hpcgnn.evaluate import main

    return main(argv)


def actions_of(parser, argv):
    """The actions a command line of ``parser`` starting like ``argv`` can reach (a subcommand's too)."""
    actions = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            actions += actions_of(action.choices[argv[0]], argv[1:])
        else:
            actions.append(action)
    return actions


def flag_of(action):
    return next((s for s in action.option_strings if s.startswith("--")), None)


def domain_flags(tmp):
    """``(command, parser, main, base argv, flag, domain)`` of every flag with a Domain."""
    found = []
    for name, parser, main, argv in commands(tmp):
        for action in actions_of(parser, argv):
            if isinstance(action.type, Domain):
                found.append((name, parser, main, argv, flag_of(action), action.type))
    return found


def test_every_numeric_flag_declares_a_domain(tmp_path):
    missing = []
    for name, parser, _, argv in commands(tmp_path):
        for action in actions_of(parser, argv):
            kind = action.type
            if kind is None or isinstance(kind, Domain) or kind in STRUCTURED:
                continue
            if kind in (int, float) and action.choices is not None:  # a choice of numbers is a domain
                continue
            missing.append(f"{name} {flag_of(action) or action.dest}: type {getattr(kind, '__name__', kind)}")
    assert not missing, "numeric flags without a Domain: " + "; ".join(missing)
    assert len(domain_flags(tmp_path)) >= 50  # the walk did find the flags


def outside(domain: Domain) -> list[str]:
    """Values just outside ``domain``, and values no numeric domain takes."""
    values = ["abc", "nan", "inf", "-inf", "1e999"]
    if domain.kind is int:
        values += ["1.5", "1e3"]
    step = 1 if domain.kind is int else 0.5
    taken = [v for v in domain.special if isinstance(v, (int, float))]
    if domain.low is not None:
        below = min([domain.low, *taken]) - step
        values.append(_text(domain.low if domain.low_open and domain.low not in domain.special else below))
    if domain.high is not None:
        values.append(_text(domain.high if domain.high_open else domain.high + step))
        values.append(_text(domain.high * 10 + 1))
    if domain.nonzero:
        values.append("0")
    if domain.share:
        values += ["0%", "101%", "x%"]
    return [v for v in values if not _accepted(domain, v)]


def _text(value):
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else repr(float(value))


def _accepted(domain, text):
    try:
        domain.convert(text)
    except InputError:
        return False
    return True


def test_every_default_is_inside_its_domain(tmp_path):
    for name, parser, _, argv, flag, domain in domain_flags(tmp_path):
        action = next(a for a in actions_of(parser, argv) if flag in a.option_strings)
        if action.default is not None:
            default = domain.convert(action.default) if isinstance(action.default, str) else action.default
            assert domain.contains(default), f"{name} {flag}: default {action.default!r} outside {domain.describe()}"


def test_values_outside_every_domain_are_refused_naming_flag_and_value(tmp_path):
    tried = 0
    for name, parser, _, argv, flag, domain in domain_flags(tmp_path):
        base = _without(argv, flag)
        for value in outside(domain):
            with pytest.raises(InputError) as refused:
                parser.parse_args([*base, f"{flag}={value}"])
            text = str(refused.value)
            assert "\n" not in text and f"field '{flag}': must be " in text and f"(value {value})" in text, \
                f"{name} {flag} {value}: {text}"
            tried += 1
    assert tried > 300


def test_a_value_outside_a_domain_ends_the_command_with_one_line(tmp_path, capsys):
    """Through each command's entry point: status 2, one line naming the flag, nothing else."""
    for name, _, main, argv, flag, domain in domain_flags(tmp_path):
        value = outside(domain)[-1]
        with pytest.raises(SystemExit) as stop:
            main([*_without(argv, flag), f"{flag}={value}"])
        err = capsys.readouterr().err
        assert stop.value.code == 2, f"{name} {flag}: {err}"
        assert err.startswith(f"hpcgnn {name.split()[0]}") and err.count("\n") == 1, err
        assert f"'{flag}'" in err and f"(value {value})" in err, err


def test_values_at_the_edges_of_every_domain_are_accepted(tmp_path):
    """The domains refuse only what they must: each bound (when inclusive) and each special value parses."""
    for name, parser, _, argv, flag, domain in domain_flags(tmp_path):
        edges = [v for v in (domain.low, domain.high) if v is not None]
        edges = [v for v, is_open in zip(edges, (domain.low_open, domain.high_open)) if not is_open]
        edges += list(domain.special) + list(domain.words)
        for value in edges:
            text = value if isinstance(value, str) else _text(value)
            parsed = vars(parser.parse_args([*_without(argv, flag), f"{flag}={text}"]))
            assert any(v == value or (isinstance(v, str) and v == text) for v in parsed.values()), (name, flag, text)


def test_the_issue_examples_are_refused(tmp_path, capsys):
    cases = {("--lr", "-1"): "must be a finite number > 0 (value -1)",
             ("--lr", "nan"): "must be a finite number > 0 (value nan)",
             ("--dropout", "1.5"): "must be a number in [0, 1) (value 1.5)",
             ("--heads", "0"): "(value 0)", ("--seed", "-1"): "(value -1)", ("--hidden", "1e9"): "(value 1e9)",
             ("--layers", "0"): "(value 0)", ("--embed-lr", "-0.01"): "(value -0.01)",
             ("--watchdog-s", "nan"): "must be 0 (never) or a number in (0, 10000000] (value nan)",
             ("--eval-batch-size", "0"): "(value 0)", ("--eval-batch-size", "-5"): "(value -5)",
             ("--fanouts", "10,4294967296"): "each from 1 to", ("--fanouts", ",".join(["5"] * 65)): "1 to 64"}
    for (flag, value), needle in cases.items():
        with pytest.raises(SystemExit) as stop:
            _train_main(["--data", str(tmp_path), f"{flag}={value}"])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1
        assert err.startswith(f"hpcgnn train: error: field '{flag}': ") and needle in err, err
    with pytest.raises(SystemExit):
        _train_main(["--data", str(tmp_path), "--sampler", "layer", "--layer-sizes", "512,99999999999"])
    assert "field '--layer-sizes': must be 1 to 64 sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _evaluate_main(["--data", str(tmp_path), "--checkpoint", "c.pt", "--batch-size", "-1"])
    assert "field '--batch-size'" in capsys.readouterr().err


def test_config_file_values_go_through_the_same_domains(tmp_path):
    for key, value, needle in (("lr", "-1", "must be a finite number > 0"), ("lr", "nan", "finite"),
                               ("dropout", "1.5", "[0, 1)"), ("hidden", "1000000000", "[1, 16384]"),
                               ("watchdog-s", "inf", "0 (never)"), ("eval-every", "-3", "'auto'"),
                               ("budget", '"0%"', "share")):
        path = tmp_path / "run.toml"
        path.write_text(f"{key} = {value}\n")
        with pytest.raises(InputError) as refused:
            config.parse_train_config(["--config", str(path), "--data", str(tmp_path)])
        text = str(refused.value)
        assert text.startswith(f"{path}: field '{key}': must be ") and needle in text, text


def _without(argv, flag):
    """``argv`` without ``flag`` and its value (the flag under test replaces it)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == flag:
            skip = True
            continue
        out.append(item)
    return out


# --- --split: a node split must leave something to train on -------------------------------------

@pytest.mark.parametrize("spec, needle", [
    ("per-class:0,30", "T >= 1 training nodes per class"),
    ("per-class:0,0", "T >= 1 training nodes per class"),
    ("0,0.5,0.5", "training fraction T of T,V,E must be above 0"),
    ("nan,0.1,0.1", "expected 'dataset'"),
    ("0.6,0.6,0.6", "expected 'dataset'"),
    ("per-class:x,3", "expected 'dataset'"),
])
def test_a_split_that_trains_on_nothing_is_refused_at_parse_time(spec, needle):
    parser = partition_module.build_parser()
    with pytest.raises(InputError, match="field '--split': .*" + needle.replace("(", r"\(").replace(")", r"\)")):
        parser.parse_args(["g.npz", "--parts", "2", "--out", "o", "--split", spec])
    for good in ("dataset", "per-class:20,30", "per-class:1,0", "0.6,0.2,0.2", "0.1,0,0"):
        assert parser.parse_args(["g.npz", "--parts", "2", "--out", "o", "--split", good]).split == good


def test_a_drawn_split_without_training_nodes_is_refused(tmp_path, capsys):
    """A fraction that rounds to no node of a small graph: refused before anything is written."""
    from hpcgnn.prep.read.npz import write_npz
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=40)
    write_npz(graph, str(tmp_path / "g.npz"))
    out = tmp_path / "parts"
    with pytest.raises(SystemExit) as stop:
        partition_command.main([str(tmp_path / "g.npz"), "--parts", "2", "--out", str(out), "--split", "0.001,0.5,0.4"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert "field '--split': the split selects no training node (40 labelled nodes)" in err, err
    assert not out.exists()
    assert partition_command.main([str(tmp_path / "g.npz"), "--parts", "2", "--out", str(out),
                                  "--split", "per-class:1,2"]) == 0


def test_the_domain_describes_itself():
    assert Domain(float, gt=0).describe() == "a finite number > 0"
    assert Domain(int, ge=1, le=64).describe() == "an integer in [1, 64]"
    assert Domain(float, ge=0, lt=1).describe() == "a number in [0, 1)"
    assert Domain(int, ge=1, le=9, special={-1: "auto", 0: "none"}).describe() == \
        "-1 (auto), 0 (none) or an integer in [1, 9]"
    assert Domain(int, ge=-4, le=4, nonzero=True).describe() == "an integer in [-4, 4] other than 0"
    share = Domain(int, ge=1, le=9, share=True)
    assert share.convert("40%") == "40%" and share.convert("3") == 3
    assert Domain(int, ge=1, le=9, words={"auto": "adaptive"}).convert(" AUTO ") == "auto"
    assert math.isclose(Domain(float, ge=0).convert("1e-3"), 1e-3)
    assert not Domain(int, ge=0).contains(np.float64(0.5)) and Domain(int, ge=0).contains(3)

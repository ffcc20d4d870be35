"""``hpcgnn inspect`` (and ``python -m hpcgnn.inspect``): summarise and verify a partitioned dataset.

The checks are :mod:`hpcgnn.prep.inspection`'s: :func:`~hpcgnn.prep.inspection.verify` re-reads
every part, :func:`~hpcgnn.prep.inspection.check_against_input` compares the stored edges with
the input read and cleaned again, :func:`~hpcgnn.prep.inspection.describe` is the summary.
"""
from __future__ import annotations

import json

from hpcgnn.format import ondisk
from hpcgnn.prep.inspection import check_against_input, describe, verify
from hpcgnn.prep.read import add_reader_arguments
from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import CommandParser
from hpcgnn.runtime.launch import check_single_process

__all__ = ["build_parser", "main"]


def build_parser():
    """Local. The ``hpcgnn inspect`` argument parser."""
    parser = CommandParser(prog="hpcgnn inspect", description="Summarise a partitioned dataset; --verify checks it.")
    parser.add_argument("directory", help="dataset directory written by 'hpcgnn partition'")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every part: checksums, CSC invariants, id permutations, and the stored "
                             "edges against meta.json's edge digest")
    parser.add_argument("--json", action="store_true", help="print meta.json (+ verification) as JSON")
    parser.add_argument("--against", metavar="INPUT", default=None,
                        help="with --verify: re-read the graph the dataset was partitioned from, clean it as "
                             "meta.json's source says, and check the dataset holds exactly its edges (give the "
                             "reader flags below that partition was given)")
    add_reader_arguments(parser)
    return parser


@entry_point("hpcgnn inspect", collective=False)
def main(argv=None):
    """Local. Command line of ``hpcgnn inspect``."""
    args = build_parser().parse_args(argv)
    check_single_process()
    meta = ondisk.read_meta(args.directory)
    if args.against is not None and not args.verify:
        raise InputError(None, "applies only with --verify", "--against", args.against)
    notes = []
    problems = verify(args.directory, meta, notes) if args.verify else None
    if args.against is not None and problems:
        notes.append(f"input check not run: the dataset fails the checks above ({args.against} not read)")
    elif args.against is not None:
        check_against_input(args.directory, meta, args.against, problems, args)
    if args.json:
        out = dict(meta)
        if problems is not None:
            out["verify"] = {"ok": not problems, "problems": problems, "notes": notes}
        print(json.dumps(out, indent=1))
    else:
        print(describe(meta))
        if problems is not None:
            print("verify: OK" if not problems else "verify: FAILED\n  " + "\n  ".join(problems))
            for note in notes:
                print(f"verify: note: {note}")
    return 1 if problems else 0


if __name__ == "__main__":
    run_program(main)

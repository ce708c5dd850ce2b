"""`python -m ui report "Are tomatoes fruit?" --html run.html`: the whole run as one offline HTML file.

The report is presentation, so its command lives here, above pipeline/ (which never imports ui/):
it takes the same request options as `python -m pipeline trace` and checks input and output files
the same way, before the model is loaded (bad input exits 2 with a message naming the field).
"""
from __future__ import annotations

import argparse
import sys

from pipeline.cli import add_trace_args, run_command, trace_from_args, trace_inputs
from pipeline.cli.arguments import check_model_arg, write_json, write_output
from pipeline.cli.parser import CliParser
from pipeline.core.files import check_output_file


def cmd_report(args) -> int:
    """The run as one HTML page that opens from disk with no server and no network."""
    request, force = trace_inputs(args)
    check_output_file(args.html_file, "html")
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from .report import trace_report

    _lm, trace = trace_from_args(args, request, force)
    html = trace_report(trace)
    write_output(args.html_file, "html", lambda f: f.write(html), "the report")
    print(f"Wrote the report to {args.html_file} ({len(trace.tokens)} prompt tokens, {len(trace.steps)} generated)")
    if args.json_file:
        write_json(args.json_file, trace.to_json(include_tensors=args.tensors), "the trace")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m ui", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="one self-contained HTML file with every stage of a run")
    add_trace_args(report)
    report.add_argument("--html", dest="html_file", required=True, help="the HTML file to write")
    return parser


def main(argv=None) -> int:
    return run_command(build_parser(), {"report": cmd_report}, argv)


if __name__ == "__main__":
    sys.exit(main())

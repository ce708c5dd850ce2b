"""`tpe report "Are tomatoes fruit?" --html run.html` (also `python -m ui report`): the whole run as one offline
HTML file (ui/report.py).

The report is presentation, so its command lives here, above pipeline/ (which never imports ui/), with the same
four names as pipeline's commands (pipeline/cli/commands/): it takes trace's request options and checks input and
output files the same way, before the model is loaded (bad input exits 2 with a message naming the field).
"""
from __future__ import annotations

import argparse

from pipeline.cli.arguments import check_model_arg, write_json, write_output
from pipeline.cli.commands import trace
from pipeline.core.errors import InputError
from pipeline.core.files import check_output_file

NAME = "report"
HELP = "one self-contained HTML file with every stage of a run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    trace.add_arguments(p)
    p.add_argument("--html", dest="html_file", required=True, help="the HTML file to write")


def run(args) -> int:
    """The run as one HTML page that opens from disk with no server and no network."""
    for name in ("samples", "temperatures"):  # trace's, for many samples in one batch; the report shows one run
        if getattr(args, name) is not None:
            raise InputError(name, "draws many samples, which `trace` prints; the report shows one run: leave it "
                                   "out (or use --temperature).")
    request, force = trace.trace_inputs(args)
    check_output_file(args.html_file, "html")
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from ui.report import trace_report

    _lm, run_trace = trace.trace_from_args(args, request, force)
    html = trace_report(run_trace)
    write_output(args.html_file, "html", lambda f: f.write(html), "the report")
    print(f"Wrote the report to {args.html_file} ({len(run_trace.tokens)} prompt tokens, "
          f"{len(run_trace.steps)} generated)")
    if args.json_file:
        write_json(args.json_file, run_trace.to_json(include_tensors=args.tensors), "the trace")
    return 0

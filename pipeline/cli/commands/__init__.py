"""One module per command of the command line, each with the same four names: NAME (what is typed), HELP (its line
in `--help`), `add_arguments(parser)` and `run(args) -> int` (the exit status). pipeline.cli.COMMANDS lists them:
trace, tokens, cache_demo, cache_audit, serving, score, explain, speculate, temperature_zero, lesson. The HTML report's
command sits above pipeline/, in ui/report_command.py, and has the same four names."""

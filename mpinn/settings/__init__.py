"""A training run's configuration: one frozen RunConfig, made from the command line or the Python API's
keywords, checked against the rule table before any data is read, and resolved once the data is known.

    table     RunConfig: every option once (type, default, group, help, resume), and the resolved values
    parse     the parser and --help made from the table; from_argv, from_keywords; the option reference;
              describe: the start-up line that says what was given and what the data decided
    agree     the ranks' options compared once, before anything else
    rules     the refused combinations of options, as a table (RULES), and check()
    shapes    the defaults by model shape, the automatic batch
    resolve   the second step: the task, the shape's defaults, the batch -> a new RunConfig
    plan      the job's decisions, made once: device, gradient transport, step, table, exchange, hot rows
    resume    the outputs a run writes and the checkpoint it resumes, against its options
    messages  what a user can do after an outcome (a stop, a diverged run), naming the options
"""
from mpinn.settings.agree import agree  # noqa: F401
from mpinn.settings.parse import check_requirements, describe, from_argv, from_keywords  # noqa: F401
from mpinn.settings.plan import Plan, device_line, make_plan, resolve_device  # noqa: F401
from mpinn.settings.resume import check_outputs, claim_outputs, own_checkpoint_dir  # noqa: F401
from mpinn.settings.resolve import fixed, resolve  # noqa: F401
from mpinn.settings.rules import RULES, check  # noqa: F401
from mpinn.settings.table import DATA, DEFAULT, GIVEN, RunConfig  # noqa: F401

"""The `forget` command: preview exactly what forgetting a query changes, do exactly that,
and finish a forget that was cut off (whatever command runs next). The engine's side is
engine/privacy.py; the tables are drawn by render.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memgpt_lite.terminal import render
from memgpt_lite.terminal.commands import _agent_lock, _open_store, _require_agent
from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UserError
from memgpt_lite.terminal.user_input import confirmed


def cmd_forget(args: argparse.Namespace) -> int:
    """Preview exactly what forgetting QUERY changes in every place, then do exactly that
    (see engine/privacy.py); --dry-run only previews, --json prints it as JSON."""
    from memgpt_lite.engine import privacy

    matcher = forget_matcher(args.query, any_word=args.any, regex=args.regex)
    console = render.make_console()
    with _open_store() as store:
        row = _require_agent(store, args.agent)
        with _agent_lock(store, row.name):
            plan = planned(store, row, matcher)
            if not args.json:
                render.print_forget_plan(console, plan, full=args.dry_run)
                _hint_redacted(plan)
            if plan.empty or args.dry_run or (args.json and not args.yes):
                _print_json(args.json, plan, None)
                return EXIT_OK
            if not confirmed(args.yes, "Forget all of this? It cannot be undone."):
                print("Nothing forgotten.", file=sys.stderr)
                return EXIT_ERROR
            result = privacy.forget(store, plan)
    _print_json(args.json, plan, result)
    if not args.json:
        render.print_forget_result(console, result)
    return EXIT_ERROR if result.problems or result.undecided else EXIT_OK


def forget_matcher(query: str, *, any_word: bool = False, regex: bool = False) -> Any:
    """The Matcher for a forget query and its flags; UserError (one sentence) if unusable."""
    from memgpt_lite.engine.matching import Matcher, QueryError

    if any_word and regex:
        raise UserError("Give --any or --regex, not both.", EXIT_USAGE)
    try:
        return Matcher.build(query, "regex" if regex else "any" if any_word else "phrase")
    except QueryError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None


def planned(store: Any, row: Any, matcher: Any) -> Any:
    """The forget's plan; a regex that runs away is one sentence (and nothing changed)."""
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.matching import QueryError

    try:
        return privacy.plan_forget(store, row, matcher)
    except QueryError as exc:
        raise UserError(f"{exc} Nothing was forgotten.", EXIT_ERROR) from None


def _hint_redacted(plan: Any) -> None:
    from memgpt_lite.engine.redact import redact

    query = plan.matcher.query
    if plan.empty and plan.matcher.mode != "regex" and redact(query) != query:
        print("Secrets are stored redacted (e.g. [redacted: card number ending 1111]); "
              "forget the words around them instead.", file=sys.stderr)


def _print_json(wanted: bool, plan: Any, result: Any) -> None:
    if wanted:
        doc = {"plan": plan.to_dict(), "result": None if result is None else result.to_dict()}
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
        sys.stdout.flush()


def finish_pending_forgets() -> None:
    """Finish a forget that was cut off (kill -9, an unwritable recording), before whatever
    command runs next (but those of cli.KEEP_PENDING_FORGETS), and say so on stderr. Quiet
    when there is no database yet, or when it cannot be opened (the command itself then
    says why)."""
    from memgpt_lite.engine import config, privacy
    from memgpt_lite.engine.store import StoreError, open_store

    if not config.database_url() and not config.db_path().is_file():
        return
    try:
        with open_store() as store:
            results, waiting, dropped = privacy.finish_pending(store)
    except StoreError:
        return
    for sentence in dropped:
        print(render.visible(sentence), file=sys.stderr)
    for result in results:
        print(render.visible(render.forget_summary(result)), file=sys.stderr)
    for name in waiting:
        print(render.visible(f"A forget in agent {name!r} is not finished yet: another "
                             "memgpt-lite process has that agent open; the next command after "
                             "it closes finishes it."), file=sys.stderr)

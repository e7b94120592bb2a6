"""The docs are checked against the code: every `memgpt-lite` command line shown in the README,
CONTRIBUTING.md and docs/*.md parses with the real parser, links between the pages resolve,
CI runs the test command CONTRIBUTING.md shows, every environment variable a page names is
read by the code, the chat page's table of slash commands is the one `/help` prints, and the
memory and MCP pages name every input of the memory tools.

Command lines come from fenced code blocks (a line ending in `\\` continues on the next) and
inline code spans. A `memgpt-lite` counts where a shell would run it: first in a command
(after `$ `, environment assignments, `|`, `&&`, `;`, or inside `$(...)`), never in prose
such as "another memgpt-lite process"; what follows `#` is a comment. Two kinds of line (the
rule is written for writers in CONTRIBUTING.md):

* a synopsis shows a choice or a placeholder (`[optional]`, `a|b` without spaces, `...`/`…`,
  a word in capitals such as NAME or FILE): its command words must be known commands, each
  alternative too, and each flag one of the command it follows;
* every other line is an example, parsed whole as `memgpt-lite` parses it (cli.py's parser,
  and the bench's own after `bench`), without running anything.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memgpt_lite.lab.bench import suite
from memgpt_lite.terminal import cli

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_SHELL = {"toml", "json", "jsonl", "python", "py"}  # code blocks that hold no command lines
OPERATORS = {"|", "||", "&&", ";", "&", "|&"}
PREFIXES = {"$", "time", "exec", "nohup", "env", "command"}
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


# --------------------------------------------------------------------------- finding them


@dataclass
class Word:
    text: str
    quoted: bool = False


def code_lines(markdown: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, inline?) of every shell line in fenced code blocks and every
    inline code span."""
    lines = markdown.split("\n")
    prose = list(lines)
    fence, lang, start, pending = None, "", 0, ""
    for n, line in enumerate(lines, 1):
        opening = re.match(r"\s*(```+|~~~+)\s*(\S*)", line)
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence, lang = (None, "") if fence else (opening.group(1), opening.group(2).lower())
            prose[n - 1] = ""
            continue
        if fence is None:
            continue
        prose[n - 1] = ""
        if lang in NOT_SHELL:
            continue
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield start, pending + line, False
        pending = ""
    text = "\n".join(prose)
    for m in re.finditer(r"(`+)((?:(?!\n\s*\n).)+?)\1", text, re.DOTALL):
        n = text.count("\n", 0, m.start()) + 1
        span = m.group(2).replace("\n", " ")
        if lines[n - 1].lstrip().startswith("|"):
            span = span.replace("\\|", "|")  # a pipe inside a table cell
        yield n, span, True


def words_of(text: str) -> list[Word]:
    """Shell words: quotes removed (a quoted word is never an operator or a comment), `#` at
    the start of a word ends the line."""
    words: list[Word] = []
    current, quoted, in_word, quote = "", False, False, ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < len(text):
                i += 1
                current += text[i]
            else:
                current += c
        elif c in "'\"":
            quote, quoted, in_word = c, True, True
        elif c == "\\" and i + 1 < len(text):
            i += 1
            current, in_word = current + text[i], True
        elif c.isspace():
            if in_word:
                words.append(Word(current, quoted))
            current, quoted, in_word = "", False, False
        elif c == "#" and not in_word:
            break
        else:
            current, in_word = current + c, True
        i += 1
    if in_word:
        words.append(Word(current, quoted))
    return words


def _substitutions(text: str) -> tuple[str, list[str]]:
    """`$(...)` taken out of `text` (its insides are command lines of their own)."""
    inner: list[str] = []
    while (start := text.find("$(")) >= 0:
        depth, end = 0, start + 1
        for end in range(start + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        inner.append(text[start + 2:end])
        text = text[:start] + "SUBSTITUTION" + text[end + 1:]
    return text, inner


def commands_in(text: str) -> Iterator[list[Word]]:
    """The arguments after each `memgpt-lite` that stands first in a command of `text`."""
    text, inner = _substitutions(text)
    for nested in inner:
        yield from commands_in(nested)
    segment: list[Word] = []
    depth = 0  # inside `[...]`, a `|` separates alternatives: `[--thinking | --no-thinking]`
    for word in [*words_of(text), Word(";")]:
        if not word.quoted and word.text in OPERATORS and not depth:
            yield from _command(segment)
            segment = []
        else:
            segment.append(word)
            if not word.quoted:
                depth = max(0, depth + word.text.count("[") - word.text.count("]"))


def _command(segment: list[Word]) -> Iterator[list[Word]]:
    i = 0
    while i < len(segment) and not segment[i].quoted and (
            segment[i].text in PREFIXES or ASSIGNMENT.match(segment[i].text)):
        i += 1
    if i == len(segment) or segment[i].text != "memgpt-lite":
        return
    args, rest = [], iter(segment[i + 1:])
    for word in rest:
        redirect = re.fullmatch(r"\d*(>>?|<)(&\d*)?(\S*)", word.text)
        if redirect and not word.quoted:
            if not redirect.group(2) and not redirect.group(3):
                next(rest, None)  # `> FILE`: the target goes too
            continue
        args.append(word)
    yield args


# --------------------------------------------------------------------------- checking them


class _Refused(Exception):
    """argparse said no (an error), or wanted to exit with a non-zero status."""


class _Done(Exception):
    """argparse finished early and content (--help, --version)."""


def _quiet(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser and all its subparsers raise instead of printing and exiting."""
    def exit_(status: int = 0, message: str | None = None) -> None:
        raise (_Done() if status == 0 else _Refused(message or f"exit {status}"))

    def error(message: str) -> None:
        raise _Refused(message)

    for p in _parsers(parser):
        p.exit, p.error = exit_, error  # type: ignore[method-assign]
        p._print_message = lambda *a, **k: None  # type: ignore[method-assign]
    return parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def check_example(argv: list[str]) -> str | None:
    """Why `memgpt-lite ARGV` would not parse, or None: cli.main's own dispatch, the global
    --db first, `bench ...` to the bench's parser, then parse_args."""
    _url, argv = cli.split_db(argv)
    if argv[:1] == ["bench"]:
        parser, argv = suite.parser_for(argv[1:])
    else:
        parser = cli.build_parser()
    try:
        args = _quiet(parser).parse_args(argv)
    except _Done:
        return None
    except _Refused as exc:
        return str(exc)
    if parser.prog == "memgpt-lite" and not getattr(args, "func", None):
        return "names no command"
    return None


@dataclass
class Node:
    """A command: its parser and the commands under it (the bench's are not argparse's)."""
    parser: argparse.ArgumentParser
    children: dict[str, Node] = field(default_factory=dict)

    def option(self, name: str) -> argparse.Action | None:
        return self.parser._option_string_actions.get(name)

    def all(self) -> Iterator[Node]:
        yield self
        for child in self.children.values():
            yield from child.all()


def command_tree() -> Node:
    def node(parser: argparse.ArgumentParser) -> Node:
        children = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                children = {name: node(sub) for name, sub in action.choices.items()}
        return Node(parser, children)

    root = node(cli.build_parser())
    root.children["bench"] = Node(suite.parser_for([])[0], {
        name: Node(suite.parser_for([name])[0]) for name in ("store", "load")})
    return root


def is_synopsis(args: list[Word]) -> bool:
    return any(not w.quoted and (re.search(r"[\[\]…]|\.\.\.|\S\|\S", w.text)
                                 or PLACEHOLDER.fullmatch(w.text)) for w in args)


def check_synopsis(args: list[Word], tree: Node) -> str | None:
    """Why a usage-style line names an unknown command or flag, or None."""
    nodes, anywhere, values = [tree], False, False
    words = iter(args)
    for word in words:
        bare = word.text if word.quoted else word.text.strip("[]{}()")
        if bare in ("", "|", "...", "…"):
            continue
        alternatives = [bare] if word.quoted else bare.split("|")
        flags = [a.split("=", 1)[0] for a in alternatives if a.startswith("-") and a != "-"]
        if flags:
            for flag in flags:
                known = [n.option(flag) for n in (tree.all() if anywhere else nodes)]
                if not (any(known) if anywhere else all(known)):
                    return f"unknown option {flag}"
            action = None if anywhere else nodes[0].option(flags[0])
            if action is not None and "=" not in bare and action.nargs != 0:
                next(words, None)  # the flag's value (a placeholder, mostly)
            continue
        if values or not all(n.children for n in nodes):
            values = True  # positional values from here on
        elif PLACEHOLDER.fullmatch(bare):
            anywhere = True  # COMMAND: any command; its flags are checked against all of them
            values = True
        else:
            unknown = [a for n in nodes for a in alternatives if a not in n.children]
            if unknown:
                return f"unknown command {unknown[0]!r}"
            nodes = [n.children[a] for n in nodes for a in alternatives]
    return None


@dataclass
class Problem:
    path: str
    line: int
    command: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: memgpt-lite {self.command}"


def check_markdown(markdown: str, path: str = "<text>") -> tuple[int, list[Problem]]:
    """(how many command lines were checked, what is wrong with them)."""
    tree, checked, problems = command_tree(), 0, []
    for line, text, inline in code_lines(markdown):
        for args in commands_in(text):
            if inline and not args:
                continue  # `memgpt-lite` in a sentence names the program
            checked += 1
            why = (check_synopsis(args, tree) if is_synopsis(args)
                   else check_example([w.text for w in args]))
            if why:
                shown = " ".join(w.text for w in args)
                problems.append(Problem(path, line, shown, why))
    return checked, problems


# --------------------------------------------------------------------------- the docs


def test_every_command_line_in_the_docs_parses():
    total, problems = 0, []
    for page in PAGES:
        checked, found = check_markdown(page.read_text("utf-8"), str(page.relative_to(REPO)))
        total += checked
        problems += found
    assert not problems, "\n".join(map(str, problems))
    assert total > 80  # the README alone shows more than 30


def test_the_readme_is_short_and_starts_without_a_key():
    readme = (REPO / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 250
    first_screen = "\n".join(readme.splitlines()[:60])
    assert "memgpt-lite demo" in first_screen and "memgpt_lite.lab.fake_server" in first_screen
    assert "pytest" not in first_screen and "TEST_DATABASE_URL" not in first_screen


def test_ci_runs_the_test_command_contributing_shows():
    contributing = (REPO / "CONTRIBUTING.md").read_text("utf-8")
    shown = next(text for _, text, _ in code_lines(contributing) if "&& pytest" in text)
    install, test = (part.strip() for part in shown.split("&&"))
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text("utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    extras = shlex.split(install)[-1]
    assert any(line.startswith("python -m pip install")
               and shlex.split(line)[-1] == extras for line in ci), (extras, ci)
    assert ci[-1] == test


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    prose = "\n".join(t for _, t in _outside_fences(markdown))
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", prose, re.M)}


def _outside_fences(markdown: str) -> Iterator[tuple[int, str]]:
    fence = None
    for n, line in enumerate(markdown.split("\n"), 1):
        opening = re.match(r"\s*(```+|~~~+)", line)
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence = None if fence else opening.group(1)
            continue
        if fence is None:
            yield n, line


def link_problems(page: Path) -> list[str]:
    problems = []
    for n, line in _outside_fences(page.read_text("utf-8")):
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"(`+).+?\1", "", line)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                problems.append(f"{page.relative_to(REPO)}:{n}: no file {file}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(
                    dest.read_text("utf-8")):
                problems.append(f"{page.relative_to(REPO)}:{n}: no heading #{anchor} in {file}")
    return problems


def test_links_between_the_pages_resolve():
    problems = [p for page in PAGES for p in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_the_docs_index_lists_every_page():
    index = (REPO / "docs" / "index.md").read_text("utf-8")
    readme = (REPO / "README.md").read_text("utf-8")
    for page in (REPO / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"docs/index.md does not link {page.name}"
            assert f"](docs/{page.name})" in readme, f"the README does not link {page.name}"


VARIABLE = re.compile(r"\b(?:MEMGPT_LITE|ANTHROPIC)_[A-Z_]*[A-Z]")


def test_every_environment_variable_a_page_names_is_read_and_the_registry_is_documented():
    from memgpt_lite.engine.registry import environment_rows

    source = "\n".join(p.read_text("utf-8") for p in (REPO / "memgpt_lite").rglob("*.py"))
    tests = "\n".join(p.read_text("utf-8") for p in (REPO / "tests").glob("*.py"))
    for page in PAGES:
        for name in set(VARIABLE.findall(page.read_text("utf-8"))):
            assert f'"{name}"' in source or f'"{name}"' in tests, \
                f"{page.name} names {name}, which nothing reads"
    configuration = (REPO / "docs" / "configuration.md").read_text("utf-8")
    for names, _ in environment_rows():
        for name in names.split(", "):
            assert f"`{name}`" in configuration, f"docs/configuration.md leaves out {name}"


def test_the_memory_and_mcp_pages_name_every_input_of_every_memory_tool():
    from memgpt_lite.engine.tool_schemas import memory_tool_schemas

    memory = " ".join((REPO / "docs" / "memory.md").read_text("utf-8").split())
    mcp = (REPO / "docs" / "mcp.md").read_text("utf-8")
    for tool in memory_tool_schemas():
        inputs = list(tool["input_schema"]["properties"])
        assert f"`{tool['name']}({', '.join(inputs)})`" in memory, tool["name"]
        [row] = [r for r in mcp.splitlines() if r.startswith(f"| `{tool['name']}` |")]
        assert row.split(" | ")[1] == ", ".join(f"`{i}`" for i in inputs), row


def _slash_table() -> list[list[str]]:
    """The cells of each row of docs/chat.md's table of slash commands."""
    chat = (REPO / "docs" / "chat.md").read_text("utf-8")
    table = chat.split("## Slash commands", 1)[1].split("\n\n", 2)[1]
    return [[cell.replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
            for row in table.splitlines()[2:]]


def test_every_slash_command_of_help_is_in_the_chat_page_and_no_other():
    from memgpt_lite.terminal import slash

    rows = _slash_table()
    shown = {span for row in rows for span in re.findall(r"`([^`]+)`", row[0])}
    for command in slash.COMMANDS:
        for synopsis, _ in command.usages:
            assert synopsis in shown, f"docs/chat.md's table leaves out {synopsis}"
    for span in shown:
        assert slash.find(span.split()[0][1:]), f"docs/chat.md shows {span}: no such command"
    for alias in (a for command in slash.COMMANDS for a in command.aliases):
        assert f"/{alias}" in " ".join(cell for row in rows for cell in row), alias


# --------------------------------------------------------------------------- the checker


def _why(markdown: str) -> list[str]:
    return [f"{p.line}: {p.why}" for p in check_markdown(markdown)[1]]


@pytest.mark.parametrize("line, why", [
    ("memgpt-lite chat --no-such-flag", "unrecognized arguments: --no-such-flag"),
    ("memgpt-lite frobnicate", "invalid choice: 'frobnicate'"),
    ("memgpt-lite demo --speed fast", "must be a number of 0 or more (0: as fast as possible)"),
    ("memgpt-lite forget --any --regex Rex", "not allowed with argument"),
    ("memgpt-lite completion tcsh", "invalid choice: 'tcsh'"),
    ("memgpt-lite --db postgresql://me@db/x chatt", "invalid choice: 'chatt'"),
    ("memgpt-lite bench --quik", "unrecognized arguments: --quik"),
    ("memgpt-lite bench store --sizes 10,x", "sizes must be whole numbers"),
    ("memgpt-lite bench load --agents two", "invalid int value: 'two'"),
    ("memgpt-lite agents show NAME [--bogus]", "unknown option --bogus"),
    ("memgpt-lite agents share|unshere NAME LABEL", "unknown command 'unshere'"),
    ("memgpt-lite replay FILE [--strikt]", "unknown option --strikt"),
    ("memgpt-lite --db URL chat --agnet NAME", "unknown option --agnet"),
    ("memgpt-lite bench store --db URL --quick", "unknown option --quick"),
    ("memgpt-lite COMMAND --halp", "unknown option --halp"),
    ("memgpt-lite chat [--thinking | --no-thinkin] [--no-record]", "unknown option --no-thinkin"),
    ("memgpt-lite eval [--model ID | --replay FILE] [--jugde]", "unknown option --jugde"),
    ("memgpt-lite sessions --agent NAME --db URL", "unknown option --db"),
])
def test_the_checker_refuses_a_wrong_command_line(line, why):
    for markdown in (f"```bash\n{line}\n```", f"Run `{line}` now."):
        found = _why(markdown)
        assert len(found) == 1 and why in found[0], (markdown, found)


def test_the_program_alone_is_a_mistake_in_a_code_block_and_its_name_in_a_sentence():
    assert _why("```\nmemgpt-lite\n```") == ["2: names no command"]
    assert _why("Run `memgpt-lite` with a command.") == []


def test_the_checker_finds_commands_wherever_a_shell_would_run_them():
    markdown = "\n".join([
        "Intro with `memgpt-lite chta` inline.",                                      # 1
        "| a | `memgpt-lite chat --json \\| jq .` and `cat x \\| memgpt-lite chta` |",  # 2
        "```bash",                                                                   # 3
        "export A=1 && MEMGPT_LITE_HOME=/tmp memgpt-lite agnts list",                 # 4
        'eval "$(memgpt-lite completion tcsh)"',                                      # 5
        "$ memgpt-lite eval \\",                                                      # 6
        "    --lisst",                                                                # 7
        "memgpt-lite chat < in.txt > out.txt 2>&1; memgpt-lite modls",                # 8
        "```",
    ])
    lines = [int(w.split(":")[0]) for w in _why(markdown)]
    assert lines == [4, 5, 6, 8, 1, 2]  # code blocks first, then inline code


def test_the_checker_leaves_prose_comments_and_other_programs_alone():
    markdown = "\n".join([
        "`agent 'x' is in use by another memgpt-lite process (pid N)`",
        "`pip install 'memgpt-lite[postgres]'` and `memgpt-lite.fish`",
        "```bash",
        "memgpt-lite chat --agent work   # memgpt-lite bogus --nope",
        'memgpt-lite forget "# not a comment" --yes',
        "echo memgpt-lite bogus",
        "```",
        "```toml",
        'command = "memgpt-lite bogus"',
        "```",
        "| `memgpt-lite chat -p hi \\| jq -r .text` | `memgpt-lite chat -p \"$Q\" \\|\\| echo` |",
        "`memgpt-lite --help`, `memgpt-lite eval --help`, `memgpt-lite --version`",
        "`memgpt-lite completion bash|zsh|fish`, `memgpt-lite agents delete|rename ...`",
        "`memgpt-lite --db postgresql://… COMMAND`, `memgpt-lite COMMAND --help`",
        "`memgpt-lite bench store --db URL`, `memgpt-lite bench --quick --json out.json`",
    ])
    checked, problems = check_markdown(markdown)
    assert problems == []
    assert checked == 13

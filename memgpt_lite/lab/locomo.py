"""The LoCoMo runner: long-conversation memory questions on data the user supplies.

A sample's conversation is stored in a fresh agent's recall the way chat stores turns; each
question then goes raw through the real `conversation_search` (recall@5/@10 of the evidence,
retrieval only) or to the agent as a turn (token F1 of its answer, optionally judged).
Nothing is downloaded; progress goes to an optional callback.
"""

from __future__ import annotations

import json
import re
import string
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.recall_page import LAYOUT
from memgpt_lite.engine.records import ModelRequest, parse_iso, utc_iso
from memgpt_lite.lab.harness import (
    DEFAULT_CLOCK,
    Progress,
    ScenarioError,
    StepClock,
    parse_clock,
)
from memgpt_lite.lab.judge import ask_judge
from memgpt_lite.lab.locomo_retrieval import METRICS, CachedDense, dense_only, score_method
from memgpt_lite.lab.recall_metrics import TokenBudget

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                     5: "adversarial"}
_LOCOMO_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


def load_locomo(path: str | Path) -> list[dict[str, Any]]:
    """The samples of a locomo10.json-format file (a list, or one sample)."""
    try:
        # utf-8-sig: a file saved by Notepad starts with a byte-order mark JSON refuses.
        data = json.loads(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
    except FileNotFoundError:
        raise ScenarioError(f"no LoCoMo file at {path}") from None
    except (json.JSONDecodeError, RecursionError):
        raise ScenarioError(f"{path} is not JSON (expected the locomo10.json format)") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None
    samples = data if isinstance(data, list) else [data]
    if not samples:  # scored, it would be a table of nothing that looks like a run
        raise ScenarioError(f"{path} holds no LoCoMo samples (expected the locomo10.json "
                            "format)")
    for i, s in enumerate(samples):
        if not isinstance(s, dict) or "conversation" not in s or "qa" not in s:
            raise ScenarioError(f"{path}: sample {i} has no 'conversation' and 'qa'")
        problem = _sample_problem(s)
        if problem:
            raise ScenarioError(f"{path}: sample {i} {problem} (expected the locomo10.json "
                                "format)")
    return samples


def _sample_problem(sample: dict[str, Any]) -> str | None:
    """What in a sample's shape the runners cannot read (None: nothing). Missing texts,
    dates and ids have defaults; only containers of the wrong kind are refused here, as
    they would otherwise stop a run midway."""
    conversation, qa = sample["conversation"], sample["qa"]
    if not isinstance(conversation, dict):
        return "has a 'conversation' that is not an object"
    if not isinstance(qa, list) or not all(isinstance(q, dict) for q in qa):
        return "has a 'qa' that is not a list of questions"
    for n, q in enumerate(qa):
        # Nothing to search for or to ask: the API refuses an empty message.
        if not isinstance(q.get("question"), str) or not q["question"].strip():
            return f"has question {n} with no 'question' text (empty, missing or not text)"
    for key, turns in conversation.items():
        if re.fullmatch(r"session_\d+", key) and isinstance(turns, list) \
                and not all(isinstance(t, dict) for t in turns):
            return f"has a {key!r} whose utterances are not all objects"
        if re.fullmatch(r"session_\d+_date_time", key):
            problem = _date_problem(key, turns)
            if problem:
                return problem
    return None


def _date_problem(key: str, value: Any) -> str | None:
    """A session date the runner cannot use: not text, or written like one but no real
    time (a minute of 99, 31 February, the year 9999 that leaves no day after it). A text
    of another form is no date at all: its session is undated, as one without a date."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"has a {key!r} that is not text ({value!r})"[:200]
    if _LOCOMO_TIME.search(value) and locomo_time(value) is None:
        return f"has a {key!r} ({value!r}) that is not a real time before the year 9999"[:200]
    return None


def locomo_time(text: str | None) -> str | None:
    """'1:56 pm on 8 May, 2023' → '2023-05-08T13:56:00Z' (None when unparseable)."""
    m = _LOCOMO_TIME.search(text) if isinstance(text, str) else None
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    if int(hour) > 12 or int(year) > 9998:  # the run's clock starts a day after
        return None
    try:
        moment = datetime.strptime(f"{day} {month[:3]} {year}", "%d %b %Y")
        hour_24 = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
        return utc_iso(moment.replace(hour=hour_24, minute=int(minute), tzinfo=timezone.utc))
    except ValueError:  # 31 February, a minute of 99
        return None


@dataclass
class Utterance:
    dia_id: str
    speaker: str
    text: str
    created_at: str | None
    session: int


def locomo_utterances(conversation: dict[str, Any]) -> list[Utterance]:
    """Utterances in session order; an image's caption is kept with its text."""
    numbers = sorted(int(k.split("_")[1]) for k in conversation
                     if re.fullmatch(r"session_\d+", k) and isinstance(conversation[k], list))
    out = []
    for n in numbers:
        start = locomo_time(conversation.get(f"session_{n}_date_time"))
        for i, turn in enumerate(conversation[f"session_{n}"]):
            text = str(turn.get("text") or "")
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            at = utc_iso(parse_iso(start) + timedelta(seconds=30 * i)) if start else None
            out.append(Utterance(str(turn.get("dia_id", f"D{n}:{i + 1}")),
                                 str(turn.get("speaker", "?")), text, at, n))
    return out


def store_locomo_conversation(store: Any, agent_id: int, sample: dict[str, Any]) -> dict[int, str]:
    """Put a LoCoMo conversation in an agent's recall the way chat stores turns.

    One message per utterance (text "Speaker: utterance", so names are searchable):
    speaker_a's utterances are `user` messages, speaker_b's are `assistant` messages, and a
    new turn starts at each user message that follows an assistant one. Messages are out of
    the context queue (evicted), stamped with the session's date. Returns message id → dia_id."""
    from memgpt_lite.engine.records import Message

    conversation = sample["conversation"]
    speaker_a = conversation.get("speaker_a")
    mapping: dict[int, str] = {}
    turn_id, last_role = 0, None
    for u in locomo_utterances(conversation):
        role = "user" if u.speaker == speaker_a else "assistant"
        if turn_id == 0 or (role == "user" and last_role != "user"):
            turn_id += 1
        msg = Message(role, [{"type": "text", "text": f"{u.speaker}: {u.text}"}], turn_id,  # type: ignore[arg-type]
                      created_at=u.created_at, in_context=False)
        mapping[store.add_message(agent_id, msg)] = u.dia_id
        last_role = role
    return mapping


def _evidence(qa: dict[str, Any]) -> list[str]:
    given = qa.get("evidence") or []
    ids: list[str] = []
    # One id given alone ("D1:3") is one id, not the four characters a loop would read.
    for item in given if isinstance(given, list) else [given]:
        ids += [x for x in re.split(r"[;,\s]+", str(item)) if x]
    return ids


class AnswerLog:
    """The questions an answering run has scored, one JSON line each, written as each is
    answered: a run stopped before its end (Ctrl-C, a kill, a crash) goes on from there when
    started again, instead of paying for every question again. Its path names what the rows
    depend on (the file, the model, the judge); `finish` removes it when the run is done."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = self._read()

    def _read(self) -> dict[tuple[int, int], dict[str, Any]]:
        rows = {}
        with suppress(FileNotFoundError):
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                with suppress(ValueError, TypeError, KeyError):  # a line cut short
                    item = json.loads(line)
                    rows[(int(item["at"][0]), int(item["at"][1]))] = dict(item["row"])
        return rows

    def add(self, at: tuple[int, int], row: dict[str, Any]) -> None:
        from memgpt_lite.engine.files import private_dirs

        private_dirs(self.path.parent)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"at": list(at), "row": row}, ensure_ascii=False) + "\n")
        self.rows[at] = row

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


def run_locomo(path: str | Path, *, retrieval_only: bool = True, model_client: Any = None,
               settings: Settings | None = None, judge: Any = None,
               progress: Progress | None = None, limit: int | None = None,
               embedder: Any = None, keyword_weight: float | None = None,
               db: str | None = None, layout: int | None = None,
               weights: tuple[float, ...] = (), log: AnswerLog | None = None,
               ) -> dict[str, Any]:
    """LoCoMo: retrieval figures of the evidence through search (retrieval only; see
    `locomo_retrieval`), or token F1 of the agent's answers (needs `model_client`). Per
    category and overall.

    Retrieval scores each method side by side on the same stored conversation: keyword, and
    with an `embedder` also dense-only and hybrid (see `search.fuse`). The top-level
    `by_category` and `overall` are those of the best method run: hybrid with an embedder,
    else keyword. With `db` (a postgresql:// server) the conversations are stored in a
    scratch database there, created and dropped; else in a temporary SQLite file. `layout`
    picks conversation_search's page layout (recall_page.py); each of `weights` adds a
    method "hybrid W" fused with that keyword share (for choosing it by cross-validation).
    `log` (answering): the questions scored are kept there as they are, and those it holds
    already are not asked again."""
    samples = load_locomo(path)
    if not retrieval_only and model_client is None:
        raise ScenarioError("answering LoCoMo questions needs a model (--model), or use --retrieval-only")
    options = {"embedder": embedder, "keyword_weight": keyword_weight, "layout": layout,
               "weights": weights, "log": None if retrieval_only else log}
    rows: list[dict[str, Any]] = []
    skipped, failed = 0, []
    with _locomo_store(db) as store:
        for s_index, sample in enumerate(samples):
            for row in _sample_rows(store, sample, s_index, model_client or _NoModel(),
                                    settings or Settings(), retrieval_only, judge, limit,
                                    options):
                if row is None:
                    skipped += 1
                    continue
                if "error" in row:  # no answer to score: a wrong one would be a guess
                    failed.append(row)
                    continue
                rows.append(row)
                if progress:
                    progress(f"sample {s_index + 1}/{len(samples)} · question {len(rows)}")
    if not rows and failed:
        raise ScenarioError(f"{path}: the model call failed for every question, so none "
                            f"was scored (first: {failed[0]['error']})")
    if not rows:  # scored, it would be a table of nothing that looks like a run
        raise _nothing_to_score(path, skipped, retrieval_only)
    metrics = METRICS if retrieval_only else ("f1",) + (("judge",) if judge else ())
    report = {"dataset": "locomo", "file": str(path),
              "mode": "retrieval" if retrieval_only else "answer",
              "model": None if retrieval_only else (settings or Settings()).model,
              "metrics": list(metrics), "by_category": _by_category(rows, metrics),
              "overall": _means(rows, metrics), "categories 1-4": _means(_core(rows), metrics),
              "questions": rows, "skipped": skipped, "failed": failed,
              "evidence_not_found": sum(1 for r in rows if r.get("evidence_not_found"))}
    if retrieval_only:
        report["embedder"] = getattr(embedder, "name", None)
        report["backend"] = "postgres" if db else "sqlite"
        report["methods"] = _method_tables(rows, metrics)
    return report


def _nothing_to_score(path: str | Path, skipped: int, retrieval_only: bool) -> ScenarioError:
    if not skipped:
        return ScenarioError(f"{path} holds no questions (every sample's 'qa' is empty)")
    why = "names its evidence" if retrieval_only else "has a gold 'answer'"
    return ScenarioError(f"{path}: none of its {skipped} questions {why}, so none can be "
                         f"scored {'for retrieval' if retrieval_only else 'by its answer'}")


@contextmanager
def _locomo_store(db: str | None) -> Iterator[Any]:
    """The store the samples go into: a scratch database on the server of `db`, or a
    temporary SQLite file; each sample gets an agent of its own."""
    from memgpt_lite.engine.store import open_store

    if db:
        from memgpt_lite.lab.bench.backends import scratch_database

        with scratch_database(db) as scratch, open_store(scratch) as store:
            yield store
        return
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-locomo-") as tmp:
        with open_store(Path(tmp) / "locomo.db") as store:
            yield store


def _method_tables(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    names = dict.fromkeys(m for r in rows for m in r.get("methods", {}))
    for method in names:
        picked = [{"category": r["category"], **r["methods"][method]} for r in rows
                  if method in r.get("methods", {})]
        if picked:
            out[method] = {"by_category": _by_category(picked, metrics),
                           "overall": _means(picked, metrics),
                           "categories 1-4": _means(_core(picked), metrics)}
    return out


def _core(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Categories 1-4: the usual LoCoMo score leaves out the adversarial questions."""
    return [r for r in rows if r["category"][:1] in ("1", "2", "3", "4")]


def _sample_rows(store: Any, sample: dict[str, Any], s_index: int, client: Any,
                 settings: Settings, retrieval_only: bool, judge: Any, limit: int | None,
                 options: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
    """The rows of one sample's questions (None for one that cannot be scored in this
    mode, so the report can count it), asked of a fresh agent that holds the sample's
    conversation."""
    from memgpt_lite.engine.agent import Agent

    agent = Agent.open(store, f"locomo-{s_index + 1}", model_client=client, settings=settings,
                       clock=_after_last(sample))
    try:
        mapping = store_locomo_conversation(store, agent.id, sample)
        side = _Side(store, agent.id, mapping, options) if retrieval_only else None
        log = options.get("log")
        for q_index, qa in enumerate(sample["qa"][:limit]):
            if log is not None and (s_index, q_index) in log.rows:
                yield log.rows[(s_index, q_index)]  # answered by a run stopped before its end
                continue
            row = _locomo_question(sample, s_index, qa, agent, side, judge)
            if log is not None and row is not None and "error" not in row:
                log.add((s_index, q_index), row)
            yield row
    finally:
        agent.close()


class _Side:
    """What retrieval scoring needs of one sample: its stored texts by dia_id, the keyword
    tools, and with an embedder the dense side and the hybrid tools."""

    def __init__(self, store: Any, agent_id: int, mapping: dict[int, str],
                 options: dict[str, Any]):
        from memgpt_lite.engine.search import plain_text

        self.store, self.agent_id, self.mapping = store, agent_id, mapping
        self.texts = {mapping[m.id]: plain_text(m.role, m.content)
                      for m in store.all_messages(agent_id) if m.id in mapping}
        self.budget = TokenBudget()
        self.layout = options.get("layout") or LAYOUT
        self.keyword = self.tools(None)
        self.dense = _dense_side(store, agent_id, options)
        self.hybrid = None if self.dense is None else self.tools(self.dense)
        self.weights = {w: self.tools(self.dense.with_weight(w)) for w in options["weights"]
                        if self.dense is not None}

    def tools(self, dense: Any) -> Any:
        from memgpt_lite.engine.memory import MemoryTools

        tools = MemoryTools(self.store, self.agent_id)
        tools.dense, tools.layout = dense, self.layout
        return tools


def _dense_side(store: Any, agent_id: int, options: dict[str, Any]) -> CachedDense | None:
    """The sample's messages embedded, and the dense side that searches them (or None)."""
    embedder = options.get("embedder")
    if embedder is None:
        return None
    from memgpt_lite.engine.dense import DenseRecall
    from memgpt_lite.engine.embeddings import EmbeddingError
    from memgpt_lite.engine.indexer import index_agent

    try:
        index_agent(store, agent_id, embedder)
    except EmbeddingError as exc:  # without the vectors, dense and hybrid mean nothing
        raise ScenarioError(f"the embedder could not embed the conversation: {exc} "
                            "(dense and hybrid cannot be scored without it)") from None
    return CachedDense(DenseRecall(store, agent_id, embedder), options.get("keyword_weight"))


def _after_last(sample: dict[str, Any]) -> StepClock:
    times = [u.created_at for u in locomo_utterances(sample["conversation"]) if u.created_at]
    start = parse_iso(max(times)) + timedelta(days=1) if times else parse_clock(DEFAULT_CLOCK)
    return StepClock(start)


def _locomo_question(sample: dict[str, Any], s_index: int, qa: dict[str, Any], agent: Any,
                     side: _Side | None, judge: Any) -> dict[str, Any] | None:
    """The question's row, or None when it cannot be scored in this mode."""
    row: dict[str, Any] = {"sample": sample.get("sample_id", s_index),
                           "question": str(qa.get("question", "")),
                           "category": _category_name(qa.get("category"))}
    if side is not None:
        evidence = _evidence(qa)
        if not evidence:
            return None
        return _locomo_recall(row, evidence, side)
    if "answer" not in qa:
        return None  # adversarial items have no gold answer
    return _locomo_answer(row, str(qa["answer"]), agent, judge)


def _locomo_recall(row: dict[str, Any], evidence: list[str], side: _Side) -> dict[str, Any]:
    """Each method's figures for one raw question (see `locomo_retrieval`)."""
    question, store, agent_id = row["question"], side.store, side.agent_id
    common = (store, agent_id, question)
    rest = (evidence, side.mapping, side.texts, side.budget)
    row["methods"], retrieved = {}, {}
    row["methods"]["keyword"], retrieved["keyword"] = score_method(*common, side.keyword, *rest)
    if side.dense is not None and side.hybrid is not None:
        scores, _, _ = side.dense.rank("conversation_search", "messages", question)
        row["methods"]["dense"] = dense_only(store, agent_id, scores or {}, evidence,
                                             side.mapping)
        row["methods"]["hybrid"], retrieved["hybrid"] = score_method(*common, side.hybrid,
                                                                     *rest)
        for w, tools in side.weights.items():
            row["methods"][f"hybrid {w}"], _ = score_method(*common, tools, *rest)
    best = "hybrid" if side.dense is not None else "keyword"
    row.update(row["methods"][best])
    row["evidence"], row["retrieved"] = evidence, retrieved[best]
    # Evidence the conversation lacks (a typo in the file) can never be found: counted as a
    # miss, and the report says how many questions have some.
    missing = [e for e in evidence if e not in side.texts]
    if missing:
        row["evidence_not_found"] = missing
    return row


def _locomo_answer(row: dict[str, Any], answer: str, agent: Any, judge: Any) -> dict[str, Any]:
    reply, error = _ask(agent, row["question"])
    if error is not None:
        row.update(answer=answer, error=error)
        return row
    row.update(answer=answer, reply=reply, f1=token_f1(reply, answer))
    if judge is not None:
        verdict = ask_judge(judge, f"The reply gives this answer: {answer}", row["question"], reply)
        row["judge"] = 1.0 if verdict.startswith("PASS") else 0.0
    return row


def _ask(agent: Any, question: str) -> tuple[str, str | None]:
    """One question as one turn, the turn then removed so questions stay independent:
    (reply, None), or ("", why) when a model call failed and the turn has no answer."""
    reply, error, turn = "", None, None
    for event in agent.step(question):
        if event.kind == "error":
            error = error or event.message  # type: ignore[union-attr]
        elif event.kind == "turn_end":
            reply, turn = event.text, event.turn_id  # type: ignore[union-attr]
            if event.completed:  # type: ignore[union-attr]
                error = None
            else:
                error = error or "the turn did not complete"
    # By its id: a failed turn is no finished turn, so "the last one" would be the stored
    # conversation's last turn, and every later question would be asked without it.
    if turn is not None:
        agent.store.pop_turns(agent.id, [turn])
    return reply, error


def _category_name(category: Any) -> str:
    try:
        n = int(category)
    except (TypeError, ValueError):
        return str(category)
    return f"{n} {LOCOMO_CATEGORIES[n]}" if n in LOCOMO_CATEGORIES else str(n)


def _means(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for m in metrics:
        values = [r[m] for r in rows if m in r]
        out[m] = round(sum(values) / len(values), 4) if values else None
    return out


def _by_category(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
    return {k: _means(v, metrics) for k, v in sorted(groups.items())}


_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> list[str]:
    """SQuAD-style: lowercase, no punctuation, no articles, split on whitespace."""
    text = text.lower().translate(_NO_PUNCTUATION)
    return [w for w in text.split() if w not in ("a", "an", "the", "and")]


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return float(pred == ref)
    precision, recall = common / len(pred), common / len(ref)
    return round(2 * precision * recall / (precision + recall), 4)


class _NoModel:
    """Retrieval-only runs never call a model; if one does, that is a bug."""

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        raise AssertionError("retrieval-only evaluation made a model call")

"""Recall search, the part that does not depend on the database: text analysis, query
building and ranking. The store runs the queries it builds (FTS5 with BM25 in SQLite).

Queries are never passed to MATCH raw: they are tokenised here and rebuilt as an OR of quoted
terms, so no input can raise an FTS syntax error. unicode61 does not segment
Chinese/Japanese/Korean, so CJK runs are indexed as overlapping character bigrams generated
here (see `index_text`); trigrams would miss two-character words like 部署.

Raw questions ("When did Caroline go to the support group?") are matched beyond their exact
words: question-framing stop words are dropped, irregular verbs bring their other forms
(go → went), long words also match by a 5-letter prefix (allergies → allergic), and a message
gains a little from matching neighbours. `python -m memgpt_lite.lab.retrieval_eval` measures it.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Collection

from memgpt_lite.engine.text import clean_text

RANK_CAP = 1000  # BM25 is computed for at most this many candidate rows per search
# A message also scores this share of its matching neighbours' BM25: an answer is often
# a reply whose question holds the query's words ("How's Pepper?" / "She had surgery").
NEIGHBOUR_WEIGHT = 0.15
MAX_QUERY_TERMS = 32  # long pasted queries would make the OR match most of the table


_CJK = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
        "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(f"[^\\W_{_CJK}]+|[{_CJK}]+")  # same word boundaries as unicode61

# Words that carry no topic; dropping them keeps "what did I say about my dog" about "dog"
# and keeps an OR query from matching most of the table.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can could couldn did didn do does doesn doing don down during
each few for from further had hadn has hasn have haven having he her here hers herself him
himself his how i if in into is isn it its itself just ll let me might more most must my
myself no nor not now of off on once only or other our ours ourselves out over own re s same
shall she should so some such t than that the their theirs them themselves then there these
they this those through to too under until up very ve was wasn we were weren what when where
which while who whom why will with won would wouldn you your yours yourself yourselves d m
tell told say said remember recall mention mentioned ever anything something thing things
kind kinds type types sort sorts likely unlikely probably possibly recently currently usually
often exactly specifically particular considered consider also yet still really
""".split())
# The last lines are how questions are framed ("what kind of", "is X likely to", "recently")
# rather than what they are about; stored sentences rarely use these words for the answer.

# Questions ask in the base form ("when did she go", "what did he see") while stories are
# told in the past ("I went", "we saw"); porter stems only regular forms, so the common
# irregular verbs get their other forms added to the query. A general grammar table, not
# synonyms: base, past and past participle of each verb; verbs whose forms are also common
# nouns (bear/born, ring/rang, lie/lay, wind/wound, light/lit) are left out.
IRREGULAR_VERBS = """
arise arose arisen|awake awoke awoken|become became|begin began begun|bend bent|bleed bled
blow blew blown|break broke broken|breed bred|bring brought|build built|burn burnt
buy bought|catch caught|choose chose chosen|come came|creep crept|deal dealt|dig dug
draw drew drawn|dream dreamt|drink drank drunk|drive drove driven|eat ate eaten
fall fell fallen|feed fed|feel felt|fight fought|find found|flee fled|fly flew flown
forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten
give gave given|go went gone|grow grew grown|hang hung|hear heard|hide hid hidden|hold held
keep kept|kneel knelt|know knew known|lead led|leap leapt|learn learnt|leave left|lend lent
lose lost|make made|mean meant|meet met|pay paid|prove proven|ride rode ridden|run ran
seek sought|sell sold|send sent|sew sewn|shake shook shaken|shine shone|shoot shot
show shown|shrink shrank shrunk|sing sang sung|sit sat|sleep slept|slide slid
speak spoke spoken|spend spent|spin spun|stand stood|steal stole stolen|swear swore sworn
sweep swept|swim swam swum|swing swung|take took taken|teach taught|tear tore torn
think thought|throw threw thrown|understand understood|wake woke woken|wear wore worn
weep wept|win won|write wrote written|see saw seen
"""
_VERB_FORMS: dict[str, tuple[str, ...]] = {
    form: tuple(group.split()) for group in IRREGULAR_VERBS.replace("\n", " ").split("|")
    for form in group.split()}
PREFIX_CHARS = 5  # long words also match by their first 5 letters ("truncation stemming"):
PREFIX_MIN_WORD = 7  # allergies/allergic, medicine/medication, where porter's stems differ


def _cjk_bigrams(run: str) -> list[str]:
    return [run[i:i + 2] for i in range(len(run) - 1)]


def index_text(text: str) -> str:
    """The text as indexed: CJK runs become their bigrams plus the last character, so every
    character starts some token (a one-character query is then a prefix query)."""
    if not _CJK_RUN.search(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(_cjk_bigrams(m.group()) + [m.group()[-1]]) + " ",
                        text)


def query_terms(query: str) -> list[str]:
    """Search terms for a natural-language query: lowercased words without stop words (all
    words if only stop words), CJK runs as bigrams ('*'-suffixed single characters)."""
    words, seen = [], set()
    for tok in _WORD.findall(clean_text(query).lower()):
        if _CJK_RUN.fullmatch(tok):
            grams = _cjk_bigrams(tok) if len(tok) > 1 else [tok + "*"]
        else:
            grams = [tok]
        for g in grams:
            if g not in seen:
                seen.add(g)
                words.append(g)
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:MAX_QUERY_TERMS]


def match_terms(query: str) -> list[str]:
    """The query's terms as FTS5 strings: each double-quoted (so operators and punctuation
    are just text); one-character CJK terms as prefix queries. English words also bring
    their irregular verb forms and, when long, their first letters as a prefix query."""
    parts: list[str] = []
    for term in query_terms(query):
        if term.endswith("*"):
            parts.append(_quote(term[:-1]) + "*")
            continue
        parts.append(_quote(term))
        parts += [_quote(f) for f in _VERB_FORMS.get(term, ()) if f != term]
        if len(term) >= PREFIX_MIN_WORD and term.isalpha() and not _CJK_RUN.search(term):
            parts.append(_quote(term[:PREFIX_CHARS]) + "*")
    return list(dict.fromkeys(parts))[:2 * MAX_QUERY_TERMS]


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH string for any of the query's terms; None when it has no searchable words."""
    return " OR ".join(match_terms(query)) or None


def word_set(text: str) -> set[str]:
    return set(_WORD.findall(index_text(text.lower())))


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def plain_text(role: str, content: list[dict] | str) -> str:
    """What conversation_search indexes: only the text blocks of user/assistant messages.
    Tool inputs and results are left out so earlier search results are not found again."""
    if isinstance(content, str):
        return content
    if role not in ("user", "assistant"):
        return ""
    return "\n".join(str(b.get("text", "")) for b in content
                     if isinstance(b, dict) and b.get("type") == "text")


# --------------------------------------------------------------------------- ranking


def candidate_terms(terms: list[str], doc_freq: Callable[[str], int]) -> list[str]:
    """Which terms select candidates: the rarest ones, while together they match at most
    RANK_CAP rows (always at least the rarest). Rows matching only very common words are
    left out when rarer words match, as Lucene's cutoff-frequency queries do; in a small
    store every term is used, i.e. a plain OR of all terms. `doc_freq` may stop counting
    past RANK_CAP: only "small or not" matters."""
    if len(terms) <= 1:
        return terms
    df = {t: doc_freq(t) for t in terms}
    chosen, total = [], 0
    for term in sorted(terms, key=lambda t: df[t]):
        if df[term] == 0:
            continue
        if chosen and total + df[term] > RANK_CAP:
            break
        chosen.append(term)
        total += df[term]
    return chosen or terms


def with_neighbours(rows: list[tuple[int, float, int]]) -> dict[int, float]:
    """{id: score} of candidate rows (id, score, position in the agent's history): each
    score plus NEIGHBOUR_WEIGHT times that of the adjacent messages (position ± 1) that
    are candidates too, i.e. match the query in the same history."""
    own = {pos: score for _, score, pos in rows}
    get, w = own.get, NEIGHBOUR_WEIGHT
    return {i: score + w * (get(pos - 1, 0.0) + get(pos + 1, 0.0)) for i, score, pos in rows}


def place(scores: dict[int, float], leave_out: Collection[int] = (),
          below: Collection[int] = ()) -> dict[int, float]:
    """Scores without the `leave_out` ids and with the `below` ids after every other
    candidate (in their own order): search spends the model's tokens first on what it
    cannot already see in its context, and never on the turn it is in."""
    if not leave_out and not below:
        return scores
    gone, low = set(leave_out), set(below)
    floor = min(scores.values(), default=0.0) - 1.0
    peak = max((s for i, s in scores.items() if i in low), default=0.0)
    # Shifted under the lowest score, the demoted keep their order among themselves.
    return {i: (s - peak + floor if i in low else s) for i, s in scores.items() if i not in gone}


def top_page(scores: dict[int, float], page: int, per_page: int) -> list[int]:
    """The ids on `page` by descending score (newest first among equals)."""
    top = heapq.nlargest(page * per_page, zip(scores.values(), scores))
    return [i for _, i in top[(page - 1) * per_page:]]


# --------------------------------------------------------------------------- dense side
# numpy is imported inside these functions: it comes with the embeddings extra, and
# keyword-only search (the default) must not pay for it, not even at import.

# The keyword side's share in fused scores; the dense side gets the rest. Measured on LoCoMo
# (see docs/benchmarks.md, Retrieval quality): 0.6-0.7 is best with small local models.
KEYWORD_WEIGHT = 0.7
DENSE_CANDIDATES = 100  # the dense side proposes its best rows, ranked with the keyword ones


def quantize(rows: object) -> tuple[object, object]:
    """Unit float rows as int8 (each row scaled so its largest component is ±127) and the
    per-row scales that turn them back: a quarter of float32's size, same top-10."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.float32)
    peak = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows), np.float32)
    scales = np.where(peak == 0, 1.0, peak / 127.0).astype(np.float32)
    return np.round(rows / scales[:, None]).astype(np.int8), scales


def dense_top(matrix: object, scales: object, query: object, limit: int,
              mask: object = None) -> list[tuple[int, float]]:
    """(row index, cosine) of the `limit` rows most similar to the unit `query`, best first,
    among those where `mask` is true. An exact scan, chunked so the float copy of the int8
    matrix stays small (see docs/benchmarks.md for its cost per 100k rows)."""
    import numpy as np

    n = len(scales)  # type: ignore[arg-type]
    scores = np.empty(n, dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    for start in range(0, n, 16_384):
        chunk = matrix[start:start + 16_384]  # type: ignore[index]
        scores[start:start + len(chunk)] = chunk.astype(np.float32) @ q
    scores *= scales
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    limit = min(limit, int(np.isfinite(scores).sum()))
    if limit <= 0:
        return []
    best = np.argpartition(-scores, limit - 1)[:limit]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best]


def _minmax(scores: dict[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return {i: 1.0 for i in scores}
    return {i: (s - low) / (high - low) for i, s in scores.items()}


def fuse(keyword: dict[int, float], dense: dict[int, float],
         keyword_weight: float = KEYWORD_WEIGHT) -> dict[int, float]:
    """Weighted min-max fusion: each side's scores scaled to 0..1 over its own candidates,
    then `keyword_weight`·keyword + (1 − keyword_weight)·dense; a row one side did not
    propose gets 0 from it. (Reciprocal rank fusion was measured too and gained nothing.)"""
    k, d = _minmax(keyword), _minmax(dense)
    w = keyword_weight
    return {i: w * k.get(i, 0.0) + (1 - w) * d.get(i, 0.0) for i in k.keys() | d.keys()}


# --------------------------------------------------------------------------- the head, re-ranked
# Search layout 3 re-ranks the first pages' candidates with their texts in hand (see
# memory.py): BM25 sums what each term scores, so a message that repeats one rare word can
# outrank one that holds every word of the question; and a question about time ("When did
# she go camping?") is answered by the message that says when ("last weekend", "in May").

RERANK_PAGES = 5  # pages 1..5 are re-ranked; later pages keep BM25's order
# The weights were chosen by two-fold cross-validation over LoCoMo's conversations
# (docs/benchmarks.md): both halves chose 0.5 and 1.0 for time and date; for coverage one
# half chose 1.0, the other 0.
COVERAGE_WEIGHT = 1.0  # a hit holding every query term scores (1 + this) times its score
TIME_WEIGHT = 0.5  # for a question about time, a hit saying when scores (1 + this) times
DATE_WEIGHT = 1.0  # for a question naming a month, a hit of that month scores (1 + this) times

_TIME_QUESTION = re.compile(
    r"\b(when|how long|how many (?:days|weeks|months|years)|what (?:year|month|day|date|time)"
    r"|which (?:year|month|day|date))\b", re.I)
_MONTHS = ("january february march april may june july august september october november "
           "december jan feb mar apr jun jul aug sep sept oct nov dec")
_DAYS = ("monday tuesday wednesday thursday friday saturday sunday "
         "mon tue tues wed thu thurs fri sat sun")
# Words that say when (a relative day, a weekday, a month), matched against a message's
# words; a year and "this week"-like pairs are checked beside them.
_TIME_WORDS = frozenset(("yesterday today tonight tomorrow ago last next weekend since "
                         + _MONTHS + " " + _DAYS).split())
_THIS = tuple(f"this {w}" for w in
              "week weekend month year morning afternoon evening summer spring fall autumn "
              "winter".split())
_YEAR_WORD = re.compile(r"(?:1[89]|20)\d\d")


def asks_time(query: str) -> bool:
    """Whether the question asks when (or how long ago) something happened."""
    return bool(_TIME_QUESTION.search(query))


def says_time(text: str, words: set[str] | None = None) -> bool:
    """Whether a message says when: a relative day or week, a weekday, a month, a year.
    `words`: the text's `word_set`, when the caller has it."""
    words = word_set(text) if words is None else words
    if not words.isdisjoint(_TIME_WORDS):
        return True
    if any(len(w) == 4 and _YEAR_WORD.fullmatch(w) for w in words):
        return True
    low = text.lower()
    return "this" in words and any(p in low for p in _THIS)


def _term_keys(terms: list[str]) -> list[tuple[frozenset[str], frozenset[str]]]:
    """Per query term: its forms (a verb's irregular ones too) and their first letters."""
    keys = []
    for term in terms:
        forms = frozenset((term.rstrip("*"), *_VERB_FORMS.get(term, ())))
        keys.append((forms, frozenset(f[:PREFIX_CHARS] for f in forms
                                      if len(f) >= PREFIX_CHARS)))
    return keys


def coverage(terms: list[str], text: str, words: set[str] | None = None) -> float:
    """The share of query terms the text holds, a long word by its first letters (as the
    index matches it by prefix) and a verb by any of its irregular forms."""
    return _coverage(_term_keys(terms), word_set(text) if words is None else words)


def _coverage(keys: list[tuple[frozenset[str], frozenset[str]]], words: set[str]) -> float:
    if not keys:
        return 0.0
    stems = {w[:PREFIX_CHARS] for w in words if len(w) >= PREFIX_CHARS}
    held = sum(1 for forms, starts in keys
               if not forms.isdisjoint(words) or not starts.isdisjoint(stems))
    return held / len(keys)


_MONTH_NUMBER = {m: n % 12 + 1 for n, m in enumerate(_MONTHS.split())}
_NAMED_MONTH = re.compile(
    r"\b(?:(?:in|of|during|early|late|mid|since|on|by|before|after)\s+(?P<a>[a-z]+)"
    r"(?:,?\s+(?P<y>(?:19|20)\d\d))?|(?P<b>[a-z]+),?\s+(?P<z>(?:19|20)\d\d))\b", re.I)


def named_months(query: str) -> set[tuple[int | None, int]]:
    """The (year or None, month) pairs a question names ("in May", "June 2023"): "may"
    counts as a month only after a preposition or before a year."""
    found = set()
    for m in _NAMED_MONTH.finditer(query):
        name = (m.group("a") or m.group("b")).lower()
        if name in _MONTH_NUMBER and (len(name) > 3 or name == "may"):
            year = m.group("y") or m.group("z")
            found.add((int(year) if year else None, _MONTH_NUMBER[name]))
    return found


def in_months(created_at: str, months: set[tuple[int | None, int]]) -> bool:
    """Whether a message was written in one of `months` or the month after (an event is
    told of after it happened)."""
    year, month = int(created_at[:4]), int(created_at[5:7])
    before = (year, month - 1) if month > 1 else (year - 1, 12)
    return any((y is None or y == yy) and m == mm for y, m in months
               for yy, mm in ((year, month), before))


def rerank(query: str, head: list[tuple[int, float, str, str]]) -> list[int]:
    """The ids of `head` ((id, score, text, created_at), best first) in their re-ranked
    order: each score times (1 + COVERAGE_WEIGHT × the share of query terms held); for a
    question about time, times (1 + TIME_WEIGHT) when the text says when; for a question
    naming a month, times (1 + DATE_WEIGHT) when written in (or just after) that month.
    Equal scores keep their order."""
    keys = _term_keys(query_terms(query))
    timed = TIME_WEIGHT and asks_time(query)
    months = named_months(query) if DATE_WEIGHT else set()
    scored = []
    for rank, (i, score, text, created_at) in enumerate(head):
        words = word_set(text)
        factor = 1.0 + COVERAGE_WEIGHT * _coverage(keys, words)
        if timed and says_time(text, words):
            factor *= 1.0 + TIME_WEIGHT
        if months and in_months(created_at, months):
            factor *= 1.0 + DATE_WEIGHT
        scored.append((-score * factor, rank, i))
    return [i for _, _, i in sorted(scored)]

"""Search layouts 3 to 5: the first pages of `conversation_search`, re-ranked with their
texts in hand (`search.rerank`: every query term held, when a question asks when, the month
it names), each hit with the reply that followed it (from layout 4, a reply of a few words
is passed over: recall_page.REPLY_WORDS). Later pages keep the store's order: none of their
hits can be in the head, so the pages still hold every result once (docs/search.md).
"""

from __future__ import annotations

import math
from collections.abc import Collection

from memgpt_lite.engine import recall_page, search
from memgpt_lite.engine.records import SearchPage
from memgpt_lite.engine.store import Store


def message_page(store: Store, layout: int, agent_id: int, query: str, page: int,
                 per_page: int, *, start_date: str | None, end_date: str | None,
                 dense: dict[int, float] | None, keyword_weight: float,
                 leave_out: Collection[int], below: Collection[int],
                 conversation: int | None = None) -> SearchPage:
    """A page of message hits in the search layout `layout`: from layout 3 on, pages up to
    RERANK_PAGES come from the store's first RERANK_PAGES pages re-ranked (what is still in
    the context window, `below`, stays after the rest in the store's order), each hit with
    the reply that followed it; other pages are the store's own. `conversation`: only that
    conversation's messages (None: every conversation of the agent)."""
    words = recall_page.REPLY_WORDS.get(layout, 1)
    if layout < 3 or page > search.RERANK_PAGES:
        return store.search_messages(agent_id, query, page, per_page, start_date=start_date,
                                     end_date=end_date, dense=dense,
                                     keyword_weight=keyword_weight, leave_out=leave_out,
                                     below=below, conversation=conversation,
                                     reply_words=words)
    head = store.search_messages(agent_id, query, 1, per_page * search.RERANK_PAGES,
                                 start_date=start_date, end_date=end_date, dense=dense,
                                 keyword_weight=keyword_weight, context=False,
                                 leave_out=leave_out, below=below, conversation=conversation)
    low = set(below)
    rows = [(h.id, h.score, h.text, h.created_at) for h in head.hits if h.id not in low]
    order = search.rerank(query, rows)
    order += [h.id for h in head.hits if h.id in low]
    ids = order[(page - 1) * per_page:page * per_page]
    by_id = {h.id: h for h in head.hits}
    replies = store.replies(agent_id, ids, words)
    gone = set(ids) | set(leave_out)  # a reply that is a hit of the page is shown there
    hits = [by_id[i] for i in ids]
    for hit in hits:
        hit.context = [r for r in replies.get(hit.id, []) if r.id not in gone]
    return SearchPage(hits, page, math.ceil(head.total / per_page), head.total)

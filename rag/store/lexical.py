"""Which query words the lexical search ranks on a large index (both stores use this rule)."""

from __future__ import annotations

from typing import Callable, Sequence

# BM25 ranking visits every chunk that matches (FTS5 and PostgreSQL score all matches before the LIMIT, and
# FTS5 reads each word's whole row list for its idf): at 1M chunks one common word alone took 70+ ms. So on a
# large index a query's words are taken rarest first until their rows add up to this budget; a word found in
# more rows than that adds little to BM25 (low idf) and much to the time. Small indexes use every word.
LEXICAL_ROW_BUDGET = 20_000

# count(words, cap): for each word, the chunks holding it; counting stops at ``cap``. One call per query, so
# a store can count every word in one round trip.
Counter = Callable[[Sequence[str], "int | None"], dict[str, int]]


def choose_words(words: Sequence[str], count: Counter,
                 budget: int = LEXICAL_ROW_BUDGET) -> tuple[list[str], dict[str, int]]:
    """``(words, their document frequencies)`` to rank, joined by OR: the rarest words whose rows fit the
    budget (at least the rarest one). None when every word is over the budget: scoring such a query costs
    time in proportion to the corpus (BM25's idf reads each word's whole row list, ANDed or not: 100-200 ms
    at 1M chunks) and the dense side answers it alone."""
    capped = count(list(dict.fromkeys(words)), budget + 1)
    present = sorted((df, w) for w, df in capped.items() if 0 < df <= budget)
    chosen, rows = [], 0
    for df, word in present:
        if chosen and rows + df > budget:
            break
        chosen.append(word)
        rows += df
    return chosen, {w: capped[w] for w in chosen}

"""An array of objects whose keys hardly repeat (each object its own key) makes a table of
as many columns as rows, nearly every cell absent: written out, rows times columns cells,
a few hundred kilobytes of tool output became hundreds of megabytes and held the event
loop, every tenant's requests with it, for seconds to minutes. Such a table, which cannot
come out shorter than the text, is not written."""

from __future__ import annotations

import json
import time

from proxy.cascade.lossless import compact_text
from proxy.cascade.tables import tabulate_json


def test_a_table_wider_than_the_text_pays_for_is_not_written() -> None:
    text = json.dumps([{f"k{i}": 1} for i in range(20_000)])
    started = time.process_time()  # CPU time: a loaded machine's other work is not counted
    assert tabulate_json(text) is None
    done = compact_text(text)
    assert done is not None and done.text == json.dumps(json.loads(text), separators=(",", ":"))
    assert time.process_time() - started < 3.0  # the search was quadratic: minutes


def test_a_sparse_table_that_pays_is_still_written() -> None:
    rows = [{"id": i, "name": f"n{i}", **({"note": "x"} if i % 3 == 0 else {})} for i in range(9)]
    out = tabulate_json(json.dumps(rows))
    assert out is not None and out[1] == 1 and '["id","name","note"]' in out[0]


def test_an_array_that_is_no_table_takes_no_room_from_the_tables() -> None:
    """Objects whose keys come in differing orders are written as JSON, not as a table: the
    cells such a table would have had are no reason to leave the text's real tables out."""
    odd = [{"a": 1, "b": 2}, {"b": 1, "a": 2}, *({f"k{i}": i} for i in range(60))]
    rows = [{"name": f"n{i}", "size": i, "kind": "file"} for i in range(10)]
    out = tabulate_json(json.dumps({"odd": odd, "rows": rows}))
    assert out is not None and out[1] == 1 and '["name","size","kind"]' in out[0]
    assert json.dumps(odd, separators=(",", ":")) in out[0]

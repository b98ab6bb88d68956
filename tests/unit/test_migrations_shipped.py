"""Every migration main has shipped keeps its text: a database that applied it holds its
checksum, and the runner refuses to start on one whose file changed (``store.db``). An edit
to an applied migration fails here, in review, rather than at a user's upgrade; a change to
the schema is a new migration, added below with its checksum. (Three files were edited
before this test existed; ``store.shipped`` accepts their earlier texts.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

from proxy.store.migrations import MIGRATIONS_DIR

SHIPPED = {  # version: sha256 of the file, as store.db computes it
    1: "47cbfb5d22c57d900907ec86bf5a1d4594a553dbc378e411c212f7f743b06b32",
    2: "5ed2161a108abe3b7bb364b7f05a242ea1afa76bdab8d87b5477fb15ec15fbbc",
    3: "9fe8f0afbda830f5550a93a857cbefdf8f6a463fdc4bc6922dbbdfb515dd02e0",
    4: "e301f6d513601115b82a678ddddb6bd97dc05b37e6fc60b79f582d6a248f0a6c",
    5: "141dedf0c215a5b97e4176a7978edb4082e1e495cb6f5d4ab1472337ff847d49",
    6: "7d0b9f65a788664827922512fcae2ea7f44349edb4ace24b33b462978d0bcaf8",
    7: "87e9bdfc95426b76078895ba925f581dd10819f33e2c8b0c678936cbdb386b23",
    8: "82c85ba5b81c8fe224ccef3d402537e4ddae08c8f9b6fda9d06cd218e8d13d82",
    9: "7379ac098a284c8e07fdce4851ba5902ca3a98d8eee41ca7315ca86eda5b359d",
    10: "9bdefa1c7002b74ff501774fd833a63752eb94fcd564de746c2fb082c84cde0c",
    11: "b43eadb4ea960ba75a703676cf7aade488213486f4149d4a5a4308f952344139",
    12: "16042bf0901ea9e3da256c561447d4b762d76baba22380c5bddad13c9b8749ae",
    13: "d4d9ed771a9180273cfce8a3336bd58a4249d55c225c03bcd1fbfda511f6aa18",
    14: "eeb544111d50c651fac3d4f5f4c3177cab6e3e5409ef0149e54e7103e7e5353f",
    15: "b7c19524d464cf1378c1c72428d63b19490bf4d4baa33a6cdd956e67b21d46d3",
    16: "88f892cb2a633c333d7fee2ef128b0aca7dd74d95f535b44e3fd1b18b58ec9e2",
    17: "72cd42c2dcaf3cebe268dde807be187c9dd0a7aef77a3fa0e773d131e3689d77",
    18: "8f47a5ddab81d95d6c5060b39240752a74b63332d029a2d557d0e2a3191f64a8",
    19: "d25853132144a1ca5902991a45a5d4596ae50755ec9720d4a24d1e06d84ebf35",
    20: "3a542ffe068ad1035d59e01f2e330354f5c80bf8710c1bcd9db9ebd3cd0d95d0",
    21: "1d47e1986a0d0620c86f698cb6fa9596050d5205add30a14409712faa9f3473a",
    22: "44e77ada88708766463b412b6ae90325d3292e2f36ddfce25f296a08a173daf1",
    23: "039ec660af1e6ca53ea2cc5c0e5d9b8170935fcc4f7ce89856fa5c6f6cdcde29",
    24: "25ffdeffe8707165bd5d40a6bfca9e56fe38efebc3ba0faa6b5602191ebf4cdf",
    25: "c10b3ee4f6dd3058b53ed85f51003c1b1f101596a9c9e40e71a4defe3cb8587a",
    26: "878e32953beb42765f867a676bb9089ddbeda9d9ecac22ea3bd07a3c1a1b081f",
    27: "e67419c959cd313e39c0ade7b6263e183b5071e276228dfafbd9814d155470d8",
    28: "4bfbaa4ae408cc43b47caf662f9e0e5dd98f9afbe6d686e370c4dd985beafb54",
    29: "3048fbbc079ec16945d1a79654753ef93bf97b5883d8bba397552e9606fb52a4",
    30: "18dfaaaa907d54379e671268d2643087e5a20316f4392fd0b5b5064e754f9539",
    31: "57d17eb173f023b3bc277faeeeaebba8051912c43c7ed2cb48e98a0c4c9c5744",
    32: "8ba6c48a556d3f1fddc2ca0b0b808056fd408ca45f771930182f43937ee8ac5c",
    33: "b5524e599cf6919f94017e7db668504fc083fc78e8df210266b9e908a8ab4e4f",
    34: "c9c7f807bfc95cc40166bebaf7bb33d47ae8bec07f36ecc9cba0a8b16b68436b",
    35: "6e0628bc30119b0fb8ffdf612eaf1325beace6f5671132cbcfe2d388edcba9be",
    36: "8c78da3e6e0374f521e9f7befd8527ff98c7b4e37c603eb6b1b32111b19eeec3",
}


def _checksum(path: Path) -> str:
    return hashlib.sha256(path.read_text(encoding="utf-8").encode()).hexdigest()


def test_no_shipped_migration_is_edited_and_each_new_one_is_listed() -> None:
    files = {
        int(p.name[:4]): _checksum(p) for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")
    }
    edited = sorted(n for n, c in SHIPPED.items() if files.get(n, c) != c)
    assert not edited, f"shipped migrations edited (write a new migration instead): {edited}"
    assert not SHIPPED.keys() - files.keys(), "a shipped migration was removed"
    assert not files.keys() - SHIPPED.keys(), "list each new migration's checksum in SHIPPED"

from __future__ import annotations

from proxy.cli import main

raise SystemExit(main())

"""``python -m reliabilityd`` is the ``reliabilityd`` command."""

from __future__ import annotations

from reliabilityd.cli._main import main

raise SystemExit(main())

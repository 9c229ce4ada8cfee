"""``python -m reuse_ray`` is ``reuse-ray``."""

from .cli import main

raise SystemExit(main())

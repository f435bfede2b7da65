"""``python -m trtllm_replayssm``: the ``trtllm-replayssm`` command line."""

from .cli import main

raise SystemExit(main())

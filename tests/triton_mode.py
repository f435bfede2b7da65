"""Whether Triton kernels run under the interpreter in this test session (tests/conftest.py sets
TRITON_INTERPRET=1 when there is no CUDA, before any test module is imported)."""

import os

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

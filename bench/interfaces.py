"""The public import path of :mod:`bench.core.interfaces`, for users and plugins (``from bench.interfaces import ...``).

It is that module itself, not a copy: what a plugin registers or patches here is what the
framework sees. The framework's own modules import :mod:`bench.core.interfaces` (docs/architecture.md).
"""

import sys

from bench.core import interfaces as _interfaces

sys.modules[__name__] = _interfaces

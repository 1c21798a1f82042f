"""The public import path of :mod:`bench.core.registry`, for users and plugins (``from bench.registry import ...``).

It is that module itself, not a copy: what a plugin registers or patches here is what the
framework sees. The framework's own modules import :mod:`bench.core.registry` (docs/architecture.md).
"""

import sys

from bench.core import registry as _registry

sys.modules[__name__] = _registry

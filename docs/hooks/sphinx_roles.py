"""MkDocs hook: docstrings' Sphinx cross-reference roles read as plain code on the API pages.

PrivBench's docstrings are Google style, but some point at other objects with Sphinx roles
(``:func:`grid```, ``:class:`~bench.core.result.Result```), which Markdown renders as the
role's name before the code (":func:grid"). This hook drops the role and, as Sphinx does
for a ``~`` target, keeps only the target's last component.
"""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):"
                  r"<code>(?P<tilde>~?)(?P<target>[^<]*)</code>")


def strip_roles(html: str) -> str:
    """Returns ``html`` with every rendered Sphinx role reduced to its target in ``<code>``.

    Args:
        html: A page's HTML as the Markdown converter made it.

    Returns:
        The same HTML, ``:func:<code>~a.b.c</code>`` written ``<code>c</code>`` and
        ``:func:<code>a.b</code>`` written ``<code>a.b</code>``.
    """
    def one(match: re.Match[str]) -> str:
        target = match["target"]
        if match["tilde"]:
            target = target.rsplit(".", 1)[-1]
        return f"<code>{target}</code>"

    return ROLE.sub(one, html)


def on_page_content(html: str, page, config, files) -> str:
    """Strips the Sphinx roles from every page's HTML."""
    return strip_roles(html)

"""The docs stay true: every relative link of README.md and docs/*.md names a file that
exists, and every anchor a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from inatest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: [text](target): not images' or code's brackets (a link target has no spaces).
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^(```|~~~)")


def _prose(page: Path) -> list[str]:
    """The page's lines outside fenced code."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation gone, spaces to
    hyphens."""
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(page):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return found


def _links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for line in _prose(page)
            for target in LINK.findall(line)
            if not re.match(r"[a-z]+://|mailto:", target)]


@pytest.mark.parametrize(("page", "target"), _links(),
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_every_relative_link_resolves(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.name}: {target}: no {dest.relative_to(ROOT)}"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), f"{page.name}: {target}: no heading #{anchor}"


def test_the_slug_is_githubs() -> None:
    assert slug("Wire format (INA version 7)") == "wire-format-ina-version-7"
    assert slug("Conformance: PyTorch's own tests") == "conformance-pytorchs-own-tests"
    assert slug("`make train` and `inabench`") == "make-train-and-inabench"


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize(("page", "target"),
                         [(p, t) for p in PAGES for line in _prose(p) for t in IMAGE.findall(line)],
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_every_image_exists(page: Path, target: str) -> None:
    assert (page.parent / target).exists(), f"{page.name}: no image {target}"


def _python_blocks(page: Path) -> list[str]:
    blocks: list[str] = []
    current: list[str] | None = None
    for line in page.read_text().splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and FENCE.match(line.strip()):
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_readmes_python_example_sums_on_the_embedded_network() -> None:
    (block,) = _python_blocks(ROOT / "README.md")
    done = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[10 10 10]"


def test_the_packages_python_example_sums_floats_on_the_embedded_network() -> None:
    import ina

    assert ina.__doc__ is not None
    _, _, after = ina.__doc__.partition("::\n\n")
    lines = list(itertools.takewhile(lambda line: not line or line.startswith("    "),
                                     after.splitlines()))
    block = textwrap.dedent("\n".join(lines))
    done = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[2.5", "2.5", "2.5]", "True"]
